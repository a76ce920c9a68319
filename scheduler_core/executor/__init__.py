"""The executor SDK: register plain functions as handlers; receive commands; report results."""

from scheduler_core.executor.sdk import ExecutionContext, Executor, HandlerResult

__all__ = ["ExecutionContext", "Executor", "HandlerResult"]
