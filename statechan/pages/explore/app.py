"""The explorer's web app (Flask): pages over an :class:`Explorer`, and the server that runs it.

Every page is a GET whose address says what it shows (a start and a path: see
:mod:`statechan.pages.explore.walk`), so the browser's back and forward, a reload and a copied
link all give the same state. The app reads no file a request names: the saved runs are the
server's list (by number), the page's script and style its own package's, and nothing else is
served. It answers only requests addressed to the host it was bound to (a page elsewhere cannot
reach it through a name that resolves to this machine).
"""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flask import Flask, Response, abort, redirect, render_template, request, url_for
from werkzeug.exceptions import HTTPException
from werkzeug.serving import BaseWSGIServer, make_server

from statechan.pages import STYLE as PAGE_STYLE
from statechan.pages import diagram_block
from statechan.pages.explore.explorer import Explorer
from statechan.pages.explore.graph import draw, steps_to
from statechan.pages.explore.picture import config_said, key_label, picture, short_text
from statechan.pages.explore.walk import MOST_MOVES, Choice, Start, Walk, WalkError, choices, verdicts

if TYPE_CHECKING:
    from werkzeug.wrappers import Response as BaseResponse

POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
"""The pages load their own script and style and nothing from anywhere else."""
ACTION_GROUPS = (
    (
        "work",
        "The brokers' waiting work",
        ("deliver", "notify", "run-task", "sync-topic", "sync-store", "sync-reconcile"),
    ),
    ("clients", "Clients and admins", ("lookup", "unload", "transfer", "split")),
    ("faults", "Faults and leadership", ("crash", "restart", "shutdown", "lose-session", "reconnect", "resign")),
    ("time", "Time and the topic", ("tick", "wait", "compact")),
)


class ServeError(RuntimeError):
    """The server could not start (the message says why and what to do)."""


def create_app(explorer: Explorer, trusted_hosts: Sequence[str] | None = None) -> Flask:
    """The app over ``explorer``; ``trusted_hosts``: the Host names it answers (None: any)."""
    app = Flask(__name__, static_folder="static", template_folder="templates")
    app.config["MAX_CONTENT_LENGTH"] = 0
    trusted = None if trusted_hosts is None else {h.lower() for h in trusted_hosts}

    @app.before_request
    def _addressed_here() -> Response | None:
        """Refuse a request addressed to another name (a page elsewhere whose name was made to
        resolve to this machine): plain text, since the page's links would name that host."""
        if trusted is None:
            return None
        if _host_name(request.headers.get("Host", "")).lower() not in trusted:
            return Response(
                f"this explorer answers requests to {', '.join(sorted(trusted))} only\n", 400, mimetype="text/plain"
            )
        return None

    app.jinja_env.globals["short"] = short_text
    app.jinja_env.globals["key_label"] = key_label
    app.jinja_env.globals["page_style"] = PAGE_STYLE

    @app.after_request
    def _policy(response: Response) -> Response:
        response.headers["Content-Security-Policy"] = POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        return response

    @app.errorhandler(HTTPException)
    def _http_error(error: HTTPException) -> tuple[str, int]:
        return _message(explorer, f"{error.code} {error.name}", error.description or "", error.code or 500)

    @app.get("/")
    def home() -> BaseResponse:
        return redirect(url_for("walk_page", start="bound"))

    @app.get("/walk")
    def walk_page() -> str | tuple[str, int]:
        start_key = request.args.get("start", "bound")
        path = request.args.get("path", "")
        tokens = [t for t in path.split(".") if t] if path else []
        with explorer.lock:
            try:
                start = explorer.start_of(start_key)
            except KeyError:
                abort(404, f"There is no start {start_key!r} here: see the list under “Jump to”.")
            if len(tokens) > MOST_MOVES:
                abort(400, f"A path of {len(tokens):,} moves: this explorer walks at most {MOST_MOVES:,}.")
            try:
                walk = explorer.walk(start, tokens)
            except WalkError as exc:
                return _message(explorer, "This path cannot be walked", str(exc), 400, start)
            at = _at(request.args.get("at"), len(walk.stops) - 1)
            return render_template("walk.html", **_walk_context(explorer, walk, at))

    @app.get("/jump/counterexample")
    def jump_counterexample() -> BaseResponse | tuple[str, int]:
        with explorer.lock:
            start = explorer.counterexample_start()
            result = explorer.counterexample()
            if start is None:
                verdict = _search_said(result)
                return _message(explorer, "No counterexample", verdict, 200)
            return redirect(_walk_url(start, list(start.run)))

    @app.get("/jump/run/<int:number>")
    def jump_run(number: int) -> BaseResponse | tuple[str, int]:
        with explorer.lock:
            if number >= len(explorer.runs):
                abort(404, f"There is no saved run {number} here: see the list under “Jump to”.")
            saved = explorer.open_run(number)
            if saved.start is None:
                return _message(explorer, f"{saved.name} cannot be opened", saved.error or "", 400)
            tokens = list(saved.start.run)
            walk = explorer.walk(saved.start, tokens)
            broken = next((s.number for s in walk.stops if s.broken), len(walk.stops) - 1)
            return redirect(_walk_url(saved.start, tokens, broken))

    @app.get("/graph")
    def graph_page() -> str | tuple[str, int]:
        with explorer.lock:
            found = explorer.graph()
            if found.result is None:
                return _message(explorer, "The state graph is not drawn", found.refused or "", 413)
            result = found.result
            drawn = draw(result, url_for("graph_state", node=0).removesuffix("0") + "{}")
            path_steps = [(n, short_text(a.describe())) for n, a in zip(drawn.path[1:], result.path, strict=False)]
            return render_template(
                "graph.html",
                explorer=explorer,
                result=result,
                drawn=drawn,
                said=_search_said(result),
                path_steps=path_steps,
            )

    @app.get("/graph/state/<int:node>")
    def graph_state(node: int) -> BaseResponse:
        with explorer.lock:
            found = explorer.graph()
            if found.result is None or node >= len(found.result.nodes):
                abort(404, f"There is no state {node} in the graph.")
            from statechan.pages.explore.walk import follow

            steps = steps_to(found.result.nodes, node)
            actions = [a for a, _ in steps]
            picks = [p for _, ps in steps for p in ps]
            tokens, problem = follow(explorer.start, actions, picks)
            if problem is not None:
                abort(500, f"The graph's state {node} cannot be reached again: {problem}")
            return redirect(_walk_url(explorer.start, tokens))

    return app


def _host_name(header: str) -> str:
    """The name in a Host header, its port dropped (``[::1]:8080`` gives ``[::1]``)."""
    if header.startswith("["):
        return header[: header.find("]") + 1]
    return header.split(":", 1)[0]


def _at(raw: str | None, last: int) -> int:
    if raw is None or raw == "":
        return last
    if not raw.isdigit():
        abort(400, f"at={raw[:20]!r}: expected the number of a state of the path (0 to {last})")
    at = int(raw)
    if at > last:
        abort(400, f"at={at}: the path has states 0 to {last}")
    return at


def _walk_url(start: Start, tokens: Sequence[str], at: int | None = None) -> str:
    args: dict[str, Any] = {"start": start.key}
    if tokens:
        args["path"] = ".".join(tokens)
    if at is not None and at != len(tokens):
        args["at"] = at
    return url_for("walk_page", **args)


def _search_said(result: Any) -> str:
    """The checker's verdict on the bound, in a sentence."""
    size = f"{result.states:,} states, {result.transitions:,} transitions, depth {result.depth}"
    if result.violation is not None:
        return f"The search found a counterexample ({len(result.path)} steps; {size}): {result.violation}"
    if result.liveness is not None:
        return f"The search found a run that never settles ({size}): {result.liveness}"
    if not result.complete:
        return f"The search stopped at the {result.stopped} without a counterexample ({size})."
    return f"No counterexample within the bound: every state holds every invariant and can settle ({size})."


@dataclass(frozen=True)
class ChoiceGroup:
    id: str
    title: str
    inside: list[tuple[Choice, str]]
    outside: list[tuple[Choice, str]]


def _grouped(start: Start, walk: Walk, at: int, found: list[Choice]) -> list[ChoiceGroup]:
    tokens = walk.tokens[:at]
    groups = []
    for gid, title, kinds in ACTION_GROUPS:
        mine = [(c, _walk_url(start, [*tokens, c.token])) for c in found if c.move.action.kind in kinds]
        inside = [(c, url) for c, url in mine if c.outside is None]
        outside = [(c, url) for c, url in mine if c.outside is not None]
        if inside or outside:
            groups.append(ChoiceGroup(gid, title, inside, outside))
    return groups


def _walk_context(explorer: Explorer, walk: Walk, at: int) -> dict[str, Any]:
    from statechan.sequence import breach, run_diagram, statements

    start = walk.start
    stop = walk.stops[at]
    tokens = walk.tokens
    last = len(walk.stops) - 1
    before = walk.stops[at - 1].state if at > 0 else None
    # forward: along the path, then along the start's run when the path follows it
    forward = None
    if at < last:
        forward = _walk_url(start, tokens, at + 1)
    elif start.run and tuple(tokens) == start.run[: len(tokens)] and len(tokens) < len(start.run):
        forward = _walk_url(start, list(start.run[: len(tokens) + 1]))
    follows_run = bool(start.run) and tuple(tokens[:at]) == start.run[:at]
    run_stopped = start.run_error if follows_run and at == len(start.run) else None
    found = choices(start, stop, short_text)
    picked = walk.stops[at + 1].token if at < last else None
    moves = walk.moves[:at]
    diagram = run_diagram(
        start.config,
        [m.action for m in moves],
        start.title,
        picks=walk.picks(at),
    )
    known = statements()
    for group, each in zip(diagram.groups, walk.stops[: at + 1], strict=False):
        group.breaches.extend(breach(str(v), known) for v in each.broken)
    diagram.groups[-1].focus = True
    diagram.checked = True
    judged = verdicts(walk, at)
    steps = [
        {
            "number": s.number,
            "label": short_text(s.move.action.describe()) if s.move else "start",
            "url": _walk_url(start, tokens, s.number),
            "broken": bool(s.broken),
            "here": s.number == at,
            "ahead": s.number > at,
        }
        for s in walk.stops
    ]
    return {
        "explorer": explorer,
        "start": start,
        "walk": walk,
        "at": at,
        "last": last,
        "stop": stop,
        "steps": steps,
        "back": _walk_url(start, tokens, at - 1) if at > 0 else None,
        "forward": forward,
        "first": _walk_url(start, tokens, 0) if at > 0 else None,
        "end": _walk_url(start, tokens, last) if at < last else None,
        "groups": _grouped(start, walk, at, found),
        "picked": picked,
        "picture": picture(start.config, stop.state, before),
        "verdicts": judged,
        "broken_here": judged.broken,
        "diagram": diagram_block(diagram, "here"),
        "run_stopped": run_stopped,
        "bounded": start.bounds is not None,
        "spent": _spent(start, stop),
        "config_said": config_said(start.config),
    }


def _spent(start: Start, stop: Any) -> list[tuple[str, int, int]]:
    if start.bounds is None:
        return []
    budget = start.bounds.budget()
    return [(kind, stop.spent.get(kind, 0), total) for kind, total in budget.items() if total or stop.spent.get(kind)]


def _message(explorer: Explorer, title: str, text: str, status: int, start: Start | None = None) -> tuple[str, int]:
    return render_template("message.html", explorer=explorer, title=title, text=text, start=start), status


# -- the server -----------------------------------------------------------------------------------------
def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (0: a free port), or :class:`ServeError` saying why not."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ServeError(f"--host {host}: not an address of this machine ({exc.strerror})") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(64)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ServeError(
                f"port {port} on {host} is in use by another program: choose another with --port, "
                "or leave --port out for a free one"
            ) from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise ServeError(f"port {port} on {host}: not allowed ({exc.strerror}); choose one above 1023") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise ServeError(f"--host {host}: not an address of this machine") from None
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


@dataclass
class Server:
    """A running explorer: its address and the WSGI server (``serve_forever`` / ``shutdown``)."""

    url: str
    wsgi: BaseWSGIServer
    sock: socket.socket

    def serve_forever(self) -> None:
        try:
            self.wsgi.serve_forever()
        finally:
            self.wsgi.server_close()
            self.sock.close()

    def shutdown(self) -> None:
        self.wsgi.shutdown()


def serve(explorer: Explorer, host: str = "127.0.0.1", port: int = 0, sock: socket.socket | None = None) -> Server:
    """Bind (``ServeError`` if that fails: bind first with :func:`bind` to fail before other
    work) and make the server; ``serve_forever`` runs it."""
    sock = sock if sock is not None else bind(host, port)
    bound_port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    names = [shown]
    if host in ("127.0.0.1", "::1", "localhost"):
        names += ["localhost", "127.0.0.1", "[::1]"]
    trusted = None if host in ("0.0.0.0", "::") else names
    app = create_app(explorer, trusted)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    wsgi = make_server(host, bound_port, app, threaded=True, fd=sock.fileno())
    return Server(f"http://{shown}:{bound_port}/", wsgi, sock)
