"""The batch-center bridge: a migrated batch-center task keeps calling its business's
HTTP callback, exactly as the batch center did (see the legacy contract, batch_center.md).

    bridge = register_batch_center_bridge(executor, token_provider=vault.lookup)

Wire format of one call (one call per sharding item, like the batch center's fan-out):

* URL: `callback_url` when absolute; a relative one is appended to `callback_base_url`
  with exactly one '/' between them (the same rule as the batch-center reader). Only
  http and https are called.
* Query parameters, for GET *and* POST: `shardIndex=<i>&shardTotal=<n>` appended to
  any query the URL already has; plus `shardParam=<text>` when the item has an explicit
  shard parameter (one element of the task's `shard_params`).
* POST body: the task's `payload` JSON object with `shardIndex`, `shardTotal` (and
  `shardParam` when present) set on it, UTF-8, `Content-Type: application/json`.
  GET sends no body.
* Header `X-BC-Token: <the business's access_token>` when the business has one. The
  token is looked up per call through `token_provider(token_ref)` and never appears in a
  result message, a log record or an exception.
* Timeout: `callback_timeout_ms`, else the job's timeout, else the contract's 30 s. It
  bounds the connect and each socket read (urllib semantics), not the total.
* Redirects are not followed (a 3xx is a failure: following it would hand the token to
  another URL); no proxy from the environment is used unless an `opener` is given.

Outcome: 2xx -> ok; any other status -> failure "HTTP <status> ..."; a timeout ->
timed out; a connection error -> failure with a one-line message.
"""

from __future__ import annotations

import json
import logging
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.client import HTTPException
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from scheduler_core.executor.sdk import ExecutionContext, Executor, HandlerResult

log = logging.getLogger(__name__)

BATCH_CENTER_HANDLER = "batch-center-bridge"
TOKEN_HEADER = "X-BC-Token"
DEFAULT_TIMEOUT_MS = 30_000  # bc_task.callback_timeout_ms default
MAX_ERROR_BODY = 200  # characters of a non-2xx response body quoted in the message
_READ_LIMIT = 64 * 1024

TokenProvider = Callable[[str], "str | None"]


class _Refused(Exception):
    """The command cannot be turned into a call (bad params): a failure, never sent."""


@dataclass(frozen=True, slots=True)
class CallbackRequest:
    """One prepared callback, the token excluded (it is added when sending)."""

    method: str
    url: str
    body: bytes | None
    timeout_s: float
    token_ref: str | None

    @property
    def safe_url(self) -> str:
        """The URL without its query (which may carry the business's own secrets)."""
        p = urlsplit(self.url)
        return urlunsplit((p.scheme, p.netloc, p.path, "", ""))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        return None  # urllib then raises HTTPError(3xx)


def default_opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def resolve_url(callback_url: str | None, base_url: str | None) -> str:
    url = (callback_url or "").strip()
    if not url:
        raise _Refused("batch-center bridge: the task has no callback_url")
    parts = urlsplit(url)
    if not parts.scheme and not parts.netloc:
        if not base_url or not base_url.strip():
            raise _Refused(f"batch-center bridge: relative callback_url {url[:100]!r} and no callback_base_url")
        url = base_url.strip().rstrip("/") + "/" + url.lstrip("/")
        parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise _Refused(f"batch-center bridge: not an http(s) URL: {_safe(url)[:100]!r}")
    return url


def _safe(url: str) -> str:
    p = urlsplit(url)
    return urlunsplit((p.scheme, p.netloc, p.path, "", ""))


def _with_query(url: str, extra: dict[str, str]) -> str:
    p = urlsplit(url)
    query = p.query + ("&" if p.query else "") + urlencode(extra)
    return urlunsplit((p.scheme, p.netloc, p.path, query, p.fragment))


def _payload_object(payload: Any) -> dict[str, Any]:
    if payload is None or (isinstance(payload, str) and not payload.strip()):
        return {}
    if isinstance(payload, dict):
        return dict(payload)
    if isinstance(payload, str):
        try:
            value = json.loads(payload)
        except ValueError as exc:
            raise _Refused(f"batch-center bridge: payload is not valid JSON: {exc}") from None
        if isinstance(value, dict):
            return value
        raise _Refused(f"batch-center bridge: payload is a JSON {type(value).__name__}, not an object")
    raise _Refused(f"batch-center bridge: payload is a {type(payload).__name__}, not a JSON object")


def prepare(ctx: ExecutionContext) -> CallbackRequest:
    """The call a command stands for (raises _Refused for params that cannot be called)."""
    try:
        params = json.loads(ctx.params) if ctx.params else {}
    except ValueError as exc:
        raise _Refused(f"batch-center bridge: params are not JSON: {exc}") from None
    if not isinstance(params, dict):
        raise _Refused("batch-center bridge: params are not a JSON object")
    if params.get("bridge") not in (None, "batch-center"):
        raise _Refused(f"batch-center bridge: params are for the {params.get('bridge')!r} bridge")
    url = resolve_url(params.get("callback_url"), params.get("callback_base_url"))
    method = str(params.get("http_method") or "POST").strip().upper()
    if method not in ("POST", "GET"):
        raise _Refused(f"batch-center bridge: unsupported http_method {method[:16]!r} (POST or GET)")
    shard: dict[str, Any] = {"shardIndex": ctx.item_index, "shardTotal": ctx.item_total}
    if ctx.item_param:
        shard["shardParam"] = ctx.item_param
    url = _with_query(url, {k: str(v) for k, v in shard.items()})
    body = None
    if method == "POST":
        obj = _payload_object(params.get("payload"))
        obj.update(shard)
        body = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    timeout_ms = params.get("callback_timeout_ms")
    if isinstance(timeout_ms, (int, float)) and not isinstance(timeout_ms, bool) and timeout_ms > 0:
        timeout_s = timeout_ms / 1000
    elif ctx.timeout.total_seconds() > 0:
        timeout_s = ctx.timeout.total_seconds()
    else:
        timeout_s = DEFAULT_TIMEOUT_MS / 1000
    token_ref = params.get("token_ref")
    return CallbackRequest(method, url, body, timeout_s, str(token_ref) if token_ref else None)


def _one_line(text: str, limit: int) -> str:
    return " ".join(text.split())[:limit]


def _is_timeout(exc: BaseException | object) -> bool:
    return isinstance(exc, (TimeoutError, socket.timeout)) or "timed out" in str(exc).lower()


class BatchCenterBridge:
    def __init__(self, token_provider: TokenProvider, *, opener: urllib.request.OpenerDirector | None = None) -> None:
        self._tokens = token_provider
        self._opener = opener or default_opener()

    def __call__(self, ctx: ExecutionContext) -> HandlerResult:
        token: str | None = None
        try:
            call = prepare(ctx)
            if call.token_ref:
                try:
                    token = self._tokens(call.token_ref)
                except Exception as exc:  # its message could hold anything: the type only
                    return HandlerResult(
                        ok=False,
                        message=f"batch-center bridge: token lookup for {call.token_ref} failed ({type(exc).__name__})",
                    )
            result = self._send(call, token, ctx)
        except _Refused as exc:
            result = HandlerResult(ok=False, message=str(exc))
        except Exception as exc:  # never let a secret escape through an exception
            result = HandlerResult(ok=False, message=f"batch-center bridge: {type(exc).__name__}: {exc}")
        return _scrubbed(result, token)

    def _send(self, call: CallbackRequest, token: str | None, ctx: ExecutionContext) -> HandlerResult:
        headers = {"User-Agent": "switchyard-batch-center-bridge", "Accept": "*/*"}
        if call.body is not None:
            headers["Content-Type"] = "application/json; charset=utf-8"
        if token:
            headers[TOKEN_HEADER] = token
        req = urllib.request.Request(call.url, data=call.body, headers=headers, method=call.method)
        where = f"{call.method} {call.safe_url}"
        shard = f"shard {ctx.item_index}/{ctx.item_total}"
        started = time.monotonic()
        try:
            with self._opener.open(req, timeout=call.timeout_s) as resp:
                status = resp.status
                resp.read(_READ_LIMIT)
        except urllib.error.HTTPError as exc:
            detail = ""
            try:
                detail = _one_line(exc.read(_READ_LIMIT).decode("utf-8", "replace"), MAX_ERROR_BODY)
            except Exception:
                pass
            finally:
                exc.close()
            log.info("batch-center callback %s (%s) -> HTTP %s", where, shard, exc.code)
            return HandlerResult(ok=False, message=f"HTTP {exc.code} from {where}" + (f": {detail}" if detail else ""))
        except urllib.error.URLError as exc:
            if _is_timeout(exc.reason):
                return self._timed_out(where, shard, call)
            reason = exc.reason
            text = f"{type(reason).__name__}: {reason}" if isinstance(reason, BaseException) else str(reason)
            log.info("batch-center callback %s (%s) failed: %s", where, shard, _one_line(text, 300))
            return HandlerResult(ok=False, message=_one_line(f"{where} failed: {text}", 500))
        except TimeoutError:
            return self._timed_out(where, shard, call)
        except (HTTPException, OSError) as exc:
            log.info("batch-center callback %s (%s) failed: %s", where, shard, type(exc).__name__)
            return HandlerResult(ok=False, message=_one_line(f"{where} failed: {type(exc).__name__}: {exc}", 500))
        elapsed_ms = (time.monotonic() - started) * 1000
        if 200 <= status < 300:
            log.info("batch-center callback %s (%s) -> HTTP %s in %.0f ms", where, shard, status, elapsed_ms)
            return HandlerResult(ok=True, message=f"HTTP {status}")
        log.info("batch-center callback %s (%s) -> HTTP %s", where, shard, status)
        return HandlerResult(ok=False, message=f"HTTP {status} from {where}")

    @staticmethod
    def _timed_out(where: str, shard: str, call: CallbackRequest) -> HandlerResult:
        log.info("batch-center callback %s (%s) timed out after %g s", where, shard, call.timeout_s)
        return HandlerResult(ok=False, message=f"{where} timed out after {call.timeout_s:g}s", timed_out=True)


def _scrubbed(result: HandlerResult, token: str | None) -> HandlerResult:
    """Defence in depth: a server echoing the token in its error body never gets it into a message."""
    if token and token in result.message:
        return HandlerResult(ok=result.ok, message=result.message.replace(token, "***"), timed_out=result.timed_out)
    return result


def register_batch_center_bridge(
    executor: Executor, token_provider: TokenProvider, *, opener: urllib.request.OpenerDirector | None = None
) -> BatchCenterBridge:
    bridge = BatchCenterBridge(token_provider, opener=opener)
    executor.handler(BATCH_CENTER_HANDLER)(bridge)
    return bridge
