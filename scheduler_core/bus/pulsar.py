"""PulsarBus: the real command bus on Apache Pulsar.

It keeps the semantics of the in-process bus (scheduler_core.bus.memory): deliver-at is
honoured, consumers of one subscription name share the messages, a subscription sees only
messages published after it was created, unacked messages come back (after nack, or when
their consumer closes). `pulsar` is imported only here: nothing Pulsar-shaped crosses the
port.

The control channel is one topic per topic prefix, read by every follower on its own
Reader from the earliest message. A broker keeps a topic's messages only while some
durable subscription has not acknowledged them (no retention is configured by default):
on the standalone broker, a topic without a subscription lost its messages at the first
ledger roll-over and trim (unload + trim, tried here). So the control topic has a
durable subscription that never acknowledges anything (`CONTROL_RETAINER`), created
before the first control message is published: every control message stays, and a
follower started months later still reads them all. They are few (a fence message per
rollback or dual-run start). A namespace message TTL would expire them: keep TTL off
for the namespace, or rebroadcast (`scheduler_core.fence.FenceService.rebroadcast`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pulsar

from scheduler_core.errors import BusError, PublishError
from scheduler_core.ports import BusMessage, ControlFeed, MessageBus, Received, Subscription

log = logging.getLogger(__name__)

# The C++ client logs every connect/lookup/producer event at INFO, so it keeps only
# warnings and errors, filtered on the C++ side and written to stdout. Not routed to a
# Python logger on purpose: with pulsar-client 3.13 that wrapper reports every level as
# enabled, so each DEBUG line (about five per message sent) takes the GIL and calls
# Python -- publish ran 3-4x slower -- and a client thread logging while the interpreter
# exits aborts the process ("terminate called without an active exception",
# apache/pulsar-client-python#256; a quarter of short runs here). Not a FileLogger on
# /dev/stderr either: that reopens the file with its own offset and overwrites a
# redirected stderr.
CLIENT_LOG_LEVEL = pulsar.LoggerLevel.Warn
_OK = pulsar.Result.Ok

# Prefetch per consumer. Large enough to keep an executor busy, small enough that one
# consumer of a Shared group does not hoard messages the others could run.
RECEIVER_QUEUE_SIZE = 500
NACK_REDELIVERY_DELAY_MS = 1000  # same as the in-process bus's NACK_DELAY_MS
DRAIN_POLL_MS = 2  # after the first message, take only what arrives within this

# The control channel (a logical topic, mapped like any other) and its retaining
# subscription (see the module docstring).
CONTROL_TOPIC = "control"
CONTROL_RETAINER = "control-retainer"
# A follower reads with this timeout; each time nothing came, it asks the broker whether
# anything is left unread, and a "no" confirms it is in sync as of the question.
CONTROL_POLL_MS = 200
# right after a message, only what is already on its way is waited for: a follower
# reading a history confirms its catch-up this soon after the last message, not a poll later
CONTROL_DRAIN_MS = 10
# In sync means confirmed within this: a follower that cannot reach the broker (or
# whose thread is stuck) stops claiming it knows every control message within seconds.
CONTROL_STALE_S = 3.0
CONTROL_TROUBLE_LOG_S = 30.0  # a follower's repeated trouble is logged at most this often

_ILLEGAL = re.compile(r"[^A-Za-z0-9._-]")
_LEGAL_PART = re.compile(r"^[A-Za-z0-9._-]+$")
# "<name>-partition-<n>" is how Pulsar names partitions of a partitioned topic.
_PARTITION_SUFFIX = "-partition-"


def topic_local_name(topic_prefix: str, logical: str) -> str:
    """The local part of the Pulsar topic for a logical topic.

    Illegal characters become "_"; when anything had to change, a short hash of the
    original name is appended so two distinct logical names never share a topic.
    """
    if not logical:
        raise ValueError("a logical topic name must not be empty")
    clean = _ILLEGAL.sub("_", logical).replace(_PARTITION_SUFFIX, "_partition_")
    if clean != logical:
        clean = f"{clean}-{hashlib.sha256(logical.encode('utf-8')).hexdigest()[:10]}"
    return f"{topic_prefix}-{clean}"


def _safe_url(url: str) -> str:
    """The URL without any user-info, for messages and repr."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Acks:
    """The acknowledgements of one publish call, counted without a lock.

    The callback runs once per message on a client I/O thread while the publishing
    thread holds the GIL for its next send, so each lock or condition taken there is
    contention on the per-message path. `next()` on an itertools.count and
    `list.append` are single C calls that never release the GIL, hence atomic in CPython:
    the callback counts and records with them, and only the last acknowledgement touches
    the event that the publishing thread waits on.
    """

    __slots__ = ("_seen", "_total", "_all_in", "errors")

    def __init__(self, total: int) -> None:
        self._seen = itertools.count(1)
        self._total = total
        self._all_in = threading.Event()
        self.errors: list[str] = []

    def settle(self, error: str | None = None) -> None:
        """One message is done: acknowledged (error None) or failed."""
        if error is not None:
            self.errors.append(error)
        if next(self._seen) == self._total:
            self._all_in.set()

    def callback(self, result: Any, _msg_id: Any) -> None:
        # Runs on a client I/O thread: an exception escaping here terminates the process,
        # so nothing may propagate.
        try:
            self.settle(None if result == _OK else str(result))
        except BaseException:  # noqa: BLE001 - see above
            try:
                self.settle("callback error")
            except BaseException:  # noqa: BLE001
                pass

    def wait(self, timeout_s: float) -> int:
        """Wait for every message to settle; returns how many never did."""
        if self._all_in.wait(timeout_s):
            return 0
        # Taking a number here uses one up, which is harmless: the call is over and a
        # late callback only sets an event nobody waits on any more.
        return max(0, self._total - (next(self._seen) - 1))


class PulsarBus(MessageBus):
    def __init__(
        self,
        service_url: str,
        *,
        admin_url: str | None = None,
        tenant: str = "public",
        namespace: str = "default",
        topic_prefix: str = "switchyard",
        token: str | None = None,
        operation_timeout_s: int = 30,
        max_pending: int = 10000,
    ) -> None:
        for label, part in (("tenant", tenant), ("namespace", namespace), ("topic_prefix", topic_prefix)):
            if not _LEGAL_PART.match(part):
                raise ValueError(f"{label} {part!r} is not a legal Pulsar name part")
        self._service_url = _safe_url(service_url)
        self._admin_url = admin_url.rstrip("/") if admin_url else None
        self._tenant = tenant
        self._namespace = namespace
        self._prefix = topic_prefix
        self._token = token  # never logged, never in a message or repr
        self._op_timeout_s = int(operation_timeout_s)
        self._max_pending = int(max_pending)
        self._lock = threading.Lock()
        self._producers: dict[str, pulsar.Producer] = {}
        self._subscriptions: list[_PulsarSubscription] = []
        self._ensured: set[tuple[str, str]] = set()
        self._followers: list[_ControlFollower] = []
        self._closed = False
        try:
            self._client = pulsar.Client(
                service_url,
                authentication=pulsar.AuthenticationToken(token) if token else None,
                operation_timeout_seconds=self._op_timeout_s,
                connection_timeout_ms=min(10000, self._op_timeout_s * 1000),
                logger=pulsar.ConsoleLogger(CLIENT_LOG_LEVEL),
            )
        except Exception as exc:  # bad URL and the like
            raise BusError(f"cannot create a Pulsar client for {self._service_url}: {_one_line(exc)}") from None

    def __repr__(self) -> str:
        return f"PulsarBus({self._service_url!r}, tenant={self._tenant!r}, namespace={self._namespace!r}, topic_prefix={self._prefix!r})"

    # -- naming --------------------------------------------------------------------------

    def local_topic(self, topic: str) -> str:
        return topic_local_name(self._prefix, topic)

    def pulsar_topic(self, topic: str) -> str:
        """The full Pulsar topic of a logical topic."""
        return f"persistent://{self._tenant}/{self._namespace}/{self.local_topic(topic)}"

    # -- publishing ----------------------------------------------------------------------

    def _producer(self, topic: str) -> pulsar.Producer:
        producer = self._producers.get(topic)
        if producer is not None:
            return producer
        with self._lock:
            if self._closed:
                raise BusError("the bus is closed")
            producer = self._producers.get(topic)
            if producer is None:
                full = self.pulsar_topic(topic)
                try:
                    producer = self._client.create_producer(
                        full,
                        send_timeout_millis=self._op_timeout_s * 1000,
                        max_pending_messages=self._max_pending,
                        # wait for room instead of failing sends at high rate
                        block_if_queue_full=True,
                        # Delayed messages are never batched by the client anyway; for
                        # immediate ones a batch goes to a single consumer of a Shared
                        # subscription, which would defeat load sharing.
                        batching_enabled=False,
                    )
                except Exception as exc:
                    raise BusError(
                        f"cannot create a producer on {full} at {self._service_url}: {_one_line(exc)}"
                    ) from None
                self._producers[topic] = producer
            return producer

    def publish(self, messages: Sequence[BusMessage]) -> None:
        if self._closed:
            raise BusError("the bus is closed")
        if not messages:
            return
        # Every producer first: a topic we cannot reach fails the call before anything
        # of it is sent.
        sends = {topic: self._producer(topic).send_async for topic in dict.fromkeys(m.topic for m in messages)}
        acks = _Acks(len(messages))
        callback = acks.callback
        # The loop below is the per-message cost of every fire chunk: one dict lookup,
        # no copies, nothing allocated but what the client itself needs.
        for m in messages:
            props = m.properties
            if props.__class__ is not dict:  # the client takes only a dict; it reads it once, here
                props = dict(props)
            deliver_at = m.deliver_at_ms
            try:
                sends[m.topic](
                    m.payload,
                    callback,
                    properties=props,  # an empty dict is skipped by the client
                    partition_key=m.key or None,
                    # the binding wants an int (a float raises) and skips a falsy one
                    deliver_at=None if deliver_at is None else int(deliver_at),
                )
            except Exception as exc:  # e.g. a payload that is not bytes; no callback follows
                acks.settle(_one_line(exc))
        # Each send fails by itself once the send timeout has passed since it was queued,
        # so one timeout after the last send bounds the wait; the margin covers the
        # callback's trip back from the I/O thread.
        missing = acks.wait(self._op_timeout_s + 5)
        errors = list(acks.errors)
        failed = len(errors) + missing
        if failed:
            what = errors[0] if errors else "no acknowledgement in time"
            raise PublishError(f"{failed} message(s) were not acknowledged by the broker ({what})", failed=failed)

    # -- consuming -----------------------------------------------------------------------

    def subscribe(self, topic: str, subscription: str) -> Subscription:
        full = self.pulsar_topic(topic)
        with self._lock:
            if self._closed:
                raise BusError("the bus is closed")
        try:
            consumer = self._client.subscribe(
                full,
                subscription,
                # the default is Exclusive, which ignores deliver-at
                consumer_type=pulsar.ConsumerType.Shared,
                initial_position=pulsar.InitialPosition.Latest,
                receiver_queue_size=RECEIVER_QUEUE_SIZE,
                negative_ack_redelivery_delay_ms=NACK_REDELIVERY_DELAY_MS,
            )
        except Exception as exc:
            raise BusError(
                f"cannot subscribe {subscription!r} to {full} at {self._service_url}: {_one_line(exc)}"
            ) from None
        sub = _PulsarSubscription(consumer, topic, self._forget)
        with self._lock:
            closed = self._closed
            if not closed:
                self._subscriptions.append(sub)
        if closed:  # the bus closed while we were subscribing
            sub.close()
            raise BusError("the bus is closed")
        return sub

    def ensure_subscription(self, topic: str, subscription: str) -> None:
        if (topic, subscription) in self._ensured:
            return
        # A durable subscription outlives its consumers: subscribing once and closing
        # leaves it on the broker, which from then on keeps the topic's messages for it.
        self.subscribe(topic, subscription).close()
        with self._lock:
            self._ensured.add((topic, subscription))

    # -- the control channel ---------------------------------------------------------------

    def publish_control(self, key: str, payload: bytes) -> None:
        self._retain_control()
        self.publish([BusMessage(CONTROL_TOPIC, payload, key=key)])

    def follow_control(self, on_message: Callable[[bytes], None]) -> ControlFeed:
        # retained from here on too, whichever side comes first
        self._retain_control()
        full = self.pulsar_topic(CONTROL_TOPIC)
        with self._lock:
            if self._closed:
                raise BusError("the bus is closed")
        try:
            reader = self._client.create_reader(full, pulsar.MessageId.earliest, receiver_queue_size=100)
        except Exception as exc:
            raise BusError(f"cannot read the control topic {full} at {self._service_url}: {_one_line(exc)}") from None
        follower = _ControlFollower(reader, full, on_message, self._unfollow)
        with self._lock:
            closed = self._closed
            if not closed:
                self._followers.append(follower)
        if closed:
            follower.close()
            raise BusError("the bus is closed")
        follower.start()
        return follower

    def _retain_control(self) -> None:
        if (CONTROL_TOPIC, CONTROL_RETAINER) in self._ensured:
            return
        full = self.pulsar_topic(CONTROL_TOPIC)
        try:
            # durable, from the earliest message still there; closed at once, never acks.
            # Shared: every process following or publishing makes sure of it, and those
            # starting together (executors of a business scaled out) attach at once; an
            # Exclusive one refused all but the first (ConsumerBusy)
            self._client.subscribe(
                full,
                CONTROL_RETAINER,
                consumer_type=pulsar.ConsumerType.Shared,
                initial_position=pulsar.InitialPosition.Earliest,
            ).close()
        except pulsar.ConsumerBusy:
            pass  # attached to by another process right now (one of an older release): it exists
        except Exception as exc:
            raise BusError(
                f"cannot create the retaining subscription on {full} at {self._service_url}: {_one_line(exc)}"
            ) from None
        with self._lock:
            self._ensured.add((CONTROL_TOPIC, CONTROL_RETAINER))

    def _unfollow(self, follower: _ControlFollower) -> None:
        with self._lock:
            if follower in self._followers:
                self._followers.remove(follower)

    def _forget(self, sub: _PulsarSubscription) -> None:
        with self._lock:
            if sub in self._subscriptions:
                self._subscriptions.remove(sub)

    # -- admin ---------------------------------------------------------------------------

    def backlog(self, topic: str, subscription: str) -> tuple[int, int]:
        """(due, delayed) messages waiting in one subscription: the consumer-lag view.

        Counts include delivered-but-unacked messages, as Pulsar's backlog does.
        """
        stats = self._topic_stats(topic)
        if stats is None:
            return (0, 0)
        entry = (stats.get("subscriptions") or {}).get(subscription)
        if entry is None:
            return (0, 0)
        total = int(entry.get("msgBacklog", 0))
        due = int(entry.get("msgBacklogNoDelayed", total))
        return (due, max(0, total - due))

    def _topic_stats(self, topic: str) -> dict[str, Any] | None:
        if self._admin_url is None:
            raise BusError("backlog needs the Pulsar admin URL (admin_url)")
        local = urllib.parse.quote(self.local_topic(topic), safe="")
        url = f"{self._admin_url}/admin/v2/persistent/{self._tenant}/{self._namespace}/{local}/stats"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        if self._token:
            request.add_header("Authorization", f"Bearer {self._token}")
        try:
            with urllib.request.urlopen(request, timeout=self._op_timeout_s) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:  # no such topic yet: nothing is waiting
                return None
            raise BusError(
                f"Pulsar admin {_safe_url(self._admin_url)} answered HTTP {exc.code} for topic stats"
            ) from None
        except (OSError, ValueError) as exc:
            raise BusError(f"Pulsar admin {_safe_url(self._admin_url)} is unreachable: {_one_line(exc)}") from None
        if not isinstance(body, dict):
            raise BusError("Pulsar admin returned unexpected topic stats")
        return body

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            producers = list(self._producers.values())
            subscriptions = list(self._subscriptions)
            followers = list(self._followers)
            self._producers.clear()
            self._subscriptions.clear()
            self._followers.clear()
        # Best effort throughout: publish already waited for its acknowledgements, and
        # the client close below releases whatever is left.
        for producer in producers:
            for step in (producer.flush, producer.close):
                try:
                    step()
                except Exception as exc:
                    log.warning("closing a Pulsar producer failed: %s", _one_line(exc))
                    break
        for sub in subscriptions:
            sub.close()
        for follower in followers:
            follower.close()
        try:
            self._client.close()
        except Exception as exc:
            log.warning("closing the Pulsar client failed: %s", _one_line(exc))


class _PulsarSubscription(Subscription):
    def __init__(self, consumer: pulsar.Consumer, topic: str, on_close: Callable[[_PulsarSubscription], None]) -> None:
        self._consumer = consumer
        self._topic = topic
        self._on_close = on_close
        self._closed = False

    def receive(self, max_messages: int, timeout: timedelta) -> list[Received]:
        if self._closed or max_messages <= 0:
            return []
        out: list[Received] = []
        wait_ms = max(0, int(timeout.total_seconds() * 1000))
        while len(out) < max_messages:
            try:
                msg = self._consumer.receive(timeout_millis=wait_ms)
            except (pulsar.Timeout, pulsar.AlreadyClosed):  # nothing (more) to take
                break
            except Exception as exc:
                if out:  # hand over what we have; the error will show again next call
                    break
                raise BusError(f"receive on {self._topic} failed: {_one_line(exc)}") from None
            out.append(self._received(msg))
            wait_ms = DRAIN_POLL_MS  # the first wait used the timeout; now only drain
        return out

    def _received(self, msg: pulsar.Message) -> Received:
        message = BusMessage(
            topic=self._topic,
            payload=msg.data() or b"",
            # The client does not expose a received message's deliver-at.
            deliver_at_ms=None,
            properties=dict(msg.properties()),
            key=msg.partition_key() or None,
        )
        return Received(message=message, receipt=msg, redelivery_count=int(msg.redelivery_count()))

    def ack(self, received: Received) -> None:
        if self._closed:
            return  # the broker redelivers it to another consumer, as after a crash
        try:
            self._consumer.acknowledge(received.receipt)
        except Exception as exc:
            raise BusError(f"ack on {self._topic} failed: {_one_line(exc)}") from None

    def nack(self, received: Received) -> None:
        if self._closed:
            return
        try:
            self._consumer.negative_acknowledge(received.receipt)
        except Exception as exc:
            raise BusError(f"nack on {self._topic} failed: {_one_line(exc)}") from None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            # disconnecting hands this consumer's unacked messages to the others
            self._consumer.close()
        except Exception as exc:
            log.warning("closing a Pulsar consumer on %s failed: %s", self._topic, _one_line(exc))
        self._on_close(self)


class _ControlFollower(ControlFeed):
    """One Reader of the control topic from the earliest message, on a thread of its own.

    In sync (`synced`) means: at a moment less than CONTROL_STALE_S ago, the broker said
    nothing was left unread, so every control message published before that moment has
    been handed over. The Reader reconnects by itself after a broker outage, from where
    it was; until it confirms again, synced() turns False within CONTROL_STALE_S."""

    def __init__(
        self, reader: Any, topic: str, on_message: Callable[[bytes], None], on_close: Callable[[_ControlFollower], None]
    ) -> None:
        self._reader = reader
        self._topic = topic
        self._on_message = on_message
        self._on_close = on_close
        self._stop = threading.Event()
        self._confirmed = float("-inf")  # time.monotonic() of the last confirmation
        self._trouble_logged = float("-inf")
        self._in_trouble = False
        self._thread = threading.Thread(target=self._loop, name="control-follower", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def synced(self) -> bool:
        return time.monotonic() - self._confirmed < CONTROL_STALE_S and not self._stop.is_set()

    def wait_synced(self, timeout: timedelta) -> bool:
        deadline = time.monotonic() + max(0.0, timeout.total_seconds())
        while not self.synced():
            if self._stop.is_set() or time.monotonic() >= deadline:
                return self.synced()
            time.sleep(0.01)
        return True

    def _loop(self) -> None:
        # an empty topic (the usual case) is confirmed at once, not after a first poll
        self._confirm()
        wait_ms = CONTROL_POLL_MS
        while not self._stop.is_set():
            try:
                msg = self._reader.read_next(timeout_millis=wait_ms)
            except pulsar.Timeout:
                self._confirm()
                wait_ms = CONTROL_POLL_MS
                continue
            except pulsar.AlreadyClosed:
                return
            except Exception as exc:  # noqa: BLE001 - the Reader reconnects; keep trying
                self._trouble(exc)
                self._stop.wait(0.5)
                continue
            try:
                self._on_message(msg.data() or b"")
            except Exception:  # noqa: BLE001 - a follower's bug must not stop the channel
                log.exception("a control message follower failed on %s", self._topic)
            wait_ms = CONTROL_DRAIN_MS

    def _confirm(self) -> None:
        asked = time.monotonic()  # a "nothing left" answer covers what was published before
        try:
            more = self._reader.has_message_available()
        except Exception as exc:  # noqa: BLE001 - an outage: stay unconfirmed, retry
            if not self._stop.is_set():
                self._trouble(exc)
            return
        if not more:
            self._confirmed = asked
            if self._in_trouble:
                self._in_trouble = False
                log.info("control topic %s: in sync again", self._topic)

    def _trouble(self, exc: BaseException) -> None:
        self._in_trouble = True
        now = time.monotonic()
        if now - self._trouble_logged >= CONTROL_TROUBLE_LOG_S:
            self._trouble_logged = now
            log.warning(
                "control topic %s: cannot confirm it is in sync (%s); commands wait", self._topic, _one_line(exc)
            )

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        try:
            self._reader.close()
        except Exception as exc:  # noqa: BLE001
            log.warning("closing the control reader on %s failed: %s", self._topic, _one_line(exc))
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._on_close(self)
