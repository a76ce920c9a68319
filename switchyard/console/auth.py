"""Who may do what in the console: tokens with a role, the browser's session cookie and
the CSRF token of its forms (issue 28, "writes are safe").

- A token is `name role token`; the roles are ordered viewer < operator < admin: a viewer
  reads, an operator also starts, stops and runs a job now, an admin also creates, edits,
  copies and deletes. Tokens come from the environment or a file, never the command line
  (`parse_tokens`, `tokens_from_file`); a bearer token is compared in constant time
  against every configured token (no early exit that times which one matched).
- A browser logs in once with its token (`/login`) and gets a signed session cookie
  (HttpOnly, SameSite=Strict), bound to the token it was made from: a token removed or
  changed ends its sessions at the next request.
- A write through the cookie must carry the session's CSRF token (the form's hidden
  field, or the X-CSRF-Token header for the API); a bearer request sends no cookie, so it
  cannot be forged by another site and needs none.
- The login form has its own (login CSRF: another site must not log a browser in as the
  other site's token, to read what the victim then does as theirs): the form's page sets a
  nonce cookie (SameSite=Strict, path /login) and carries the nonce's MAC in the form; a
  login post without the pair is refused before its token is looked at.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import json
import os
import secrets
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

COOKIE = "switchyard_session"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
LOGIN_COOKIE = "switchyard_login"
LOGIN_NONCE_TTL_S = 3600
SESSION_TTL_S = 12 * 3600
MIN_TOKEN_LEN = 16


class Role(enum.IntEnum):
    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        return self.name.lower()


class TokenError(ValueError):
    """A bad token line or file, naming where and why (the CLI's exit 2)."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request is: the token's name (the audit's actor) and its role."""

    name: str
    role: Role
    via: str  # "bearer", "cookie", or "open" (a console without tokens: anonymous reads)
    session: str = ""  # the session's id (cookie only): what its CSRF token is bound to

    def may(self, role: Role) -> bool:
        return self.role >= role


ANONYMOUS = Principal("anonymous", Role.VIEWER, "open")


@dataclass(frozen=True, slots=True)
class Token:
    name: str
    role: Role
    secret: bytes = field(repr=False)


def _role(text: str, where: str) -> Role:
    try:
        return Role[text.strip().upper()]
    except KeyError:
        raise TokenError(f"{where}: unknown role {text!r} (viewer, operator or admin)") from None


def _token(name: str, role: str, secret: str, where: str) -> Token:
    if not name or any(c.isspace() or c == ":" for c in name):
        raise TokenError(f"{where}: the name {name!r} must be one word without ':'")
    if len(secret) < MIN_TOKEN_LEN:
        raise TokenError(f"{where}: the token of {name} is shorter than {MIN_TOKEN_LEN} characters")
    return Token(name, _role(role, where), secret.encode("utf-8"))


def _unique(tokens: list[Token], where: str) -> list[Token]:
    names = [t.name for t in tokens]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise TokenError(f"{where}: the name {dup[0]} is given twice")
    values = [t.secret for t in tokens]
    if len(set(values)) != len(values):
        raise TokenError(f"{where}: two names share one token (the audit could not tell them apart)")
    return tokens


def parse_tokens(text: str, where: str = "SWITCHYARD_CONSOLE_TOKENS") -> list[Token]:
    """`name:role:token,name:role:token` (the environment's form)."""
    out = []
    for i, part in enumerate(p.strip() for p in text.split(",")):
        if not part:
            continue
        bits = part.split(":", 2)
        if len(bits) != 3:
            raise TokenError(f"{where}: entry {i + 1} is not name:role:token")
        out.append(_token(bits[0].strip(), bits[1], bits[2].strip(), f"{where} entry {i + 1}"))
    return _unique(out, where)


def tokens_from_file(path: Path) -> list[Token]:
    """One `name role token` per line (# comments, blank lines). The file must be readable
    by its owner only: a token file others can read is refused, not used."""
    try:
        st = path.stat()
    except OSError as exc:
        raise TokenError(f"{path}: cannot be read ({exc.strerror})") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TokenError(f"{path}: readable by others (mode {stat.S_IMODE(st.st_mode):o}); chmod 600 it")
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        bits = line.split()
        if len(bits) != 3:
            raise TokenError(f"{path} line {n}: not `name role token`")
        out.append(_token(bits[0], bits[1], bits[2], f"{path} line {n}"))
    return _unique(out, str(path))


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Authority:
    """The configured tokens and the key that signs this console's sessions."""

    def __init__(self, tokens: list[Token], key: bytes | None = None, ttl_s: int = SESSION_TTL_S) -> None:
        self.tokens = tokens
        # a key of this process: sessions end with it (a restart asks for the token again)
        self.key = key or secrets.token_bytes(32)
        self.ttl_s = ttl_s
        self.throttle = LoginThrottle()

    @property
    def required(self) -> bool:
        """With tokens, every request needs one (a session or a bearer)."""
        return bool(self.tokens)

    def bearer(self, given: bytes) -> Principal | None:
        found: Token | None = None
        for t in self.tokens:  # every one compared: the time does not tell which matched
            if hmac.compare_digest(given, t.secret):
                found = t
        return None if found is None else Principal(found.name, found.role, "bearer")

    def _fingerprint(self, t: Token) -> str:
        return _b64(hmac.new(self.key, b"token:" + t.secret, hashlib.sha256).digest()[:12])

    def _sign(self, payload: bytes) -> str:
        return _b64(hmac.new(self.key, b"session:" + payload, hashlib.sha256).digest())

    def session_cookie(self, p: Principal) -> str:
        token = next(t for t in self.tokens if t.name == p.name)
        body = json.dumps(
            {
                "n": p.name,
                "f": self._fingerprint(token),
                "s": secrets.token_hex(16),
                "e": int(time.time()) + self.ttl_s,
            },
            separators=(",", ":"),
        ).encode("utf-8")
        return _b64(body) + "." + self._sign(body)

    def session(self, cookie: str) -> Principal | None:
        """The principal of a session cookie; None for a forged, expired or orphaned one."""
        b64, _, sig = cookie.partition(".")
        try:
            body = _unb64(b64)
        except ValueError:
            return None
        if not hmac.compare_digest(sig, self._sign(body)):
            return None
        try:
            d = json.loads(body)
            name, fp, sid, exp = str(d["n"]), str(d["f"]), str(d["s"]), int(d["e"])
        except (ValueError, KeyError, TypeError):
            return None
        if exp < time.time():
            return None
        for t in self.tokens:  # the role is today's, and a changed token ends the session
            if t.name == name and hmac.compare_digest(fp, self._fingerprint(t)):
                return Principal(t.name, t.role, "cookie", sid)
        return None

    def csrf(self, p: Principal) -> str:
        """The CSRF token bound to a session (empty for a bearer or an open console)."""
        if not p.session:
            return ""
        return _b64(hmac.new(self.key, b"csrf:" + p.session.encode("ascii"), hashlib.sha256).digest())

    def csrf_ok(self, p: Principal, given: str) -> bool:
        want = self.csrf(p)
        return bool(want) and hmac.compare_digest(want.encode("ascii"), given.encode("ascii", "replace"))

    @staticmethod
    def login_nonce() -> str:
        """A new login form's nonce (its cookie's value)."""
        return secrets.token_hex(16)

    def login_csrf(self, nonce: str) -> str:
        """The login form's CSRF token: the MAC of its nonce cookie."""
        return _b64(hmac.new(self.key, b"login:" + nonce.encode("ascii", "replace"), hashlib.sha256).digest())

    def login_csrf_ok(self, nonce: str, given: str) -> bool:
        """Whether a login post carries the pair its form was given (the cookie, which another
        site's post does not send, and the field, which another site cannot read)."""
        if not nonce or not given:
            return False
        return hmac.compare_digest(self.login_csrf(nonce).encode("ascii"), given.encode("ascii", "replace"))


class LoginThrottle:
    """At most `attempts` wrong tokens per client address in `window_s`: a login form is
    no oracle to try tokens against (the tokens are long enough that guessing is hopeless
    anyway; this keeps the log and the store quiet too)."""

    def __init__(self, attempts: int = 10, window_s: float = 60.0) -> None:
        self.attempts = attempts
        self.window_s = window_s
        self._failed: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, client: str, now: float) -> list[float]:
        kept = [t for t in self._failed.get(client, []) if now - t < self.window_s]
        if kept:
            self._failed[client] = kept
        else:
            self._failed.pop(client, None)
        return kept

    def blocked(self, client: str) -> bool:
        with self._lock:
            return len(self._recent(client, time.monotonic())) >= self.attempts

    def failed(self, client: str) -> None:
        with self._lock:
            now = time.monotonic()
            self._failed[client] = [*self._recent(client, now), now]


def tokens_from_env(var: str = "SWITCHYARD_CONSOLE_TOKENS") -> list[Token]:
    text = os.environ.get(var, "")
    return parse_tokens(text, var) if text.strip() else []


__all__ = [
    "ANONYMOUS",
    "COOKIE",
    "CSRF_FIELD",
    "CSRF_HEADER",
    "LOGIN_COOKIE",
    "Authority",
    "LoginThrottle",
    "Principal",
    "Role",
    "Token",
    "TokenError",
    "parse_tokens",
    "tokens_from_env",
    "tokens_from_file",
]
