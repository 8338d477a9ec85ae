"""List and watch endpoints for the fake apiserver, served from the captured apiserver fixtures."""

from __future__ import annotations

import base64
import json
from http.server import ThreadingHTTPServer
from threading import Thread
from urllib.parse import parse_qs, urlparse

from support.fake_apiserver import JSONHandler


class ListWatchServer:
    """GET /api/v1/nodes and /api/v1/resourcequotas with limit/continue, watch=true from a given
    resourceVersion (older than ``oldest_rv`` -> 410 Expired, as the apiserver after compaction)."""

    def __init__(self, lists: dict[str, list[dict]], events: dict[str, list[dict]], list_rv: str,
                 oldest_rv: int = 0):
        self.lists, self.events, self.list_rv, self.oldest_rv = lists, events, list_rv, oldest_rv
        self.calls: list[str] = []
        self.conns: set = set()
        server = self

        class Handler(JSONHandler):
            def setup(self) -> None:
                super().setup()
                server.conns.add(self.connection)

            def finish(self) -> None:
                server.conns.discard(self.connection)
                super().finish()

            def do_GET(self) -> None:
                url = urlparse(self.path)
                q = {k: v[0] for k, v in parse_qs(url.query).items()}
                kind = url.path.rsplit("/", 1)[-1]
                server.calls.append(f"{kind}:{'watch' if q.get('watch') in ('true', 'True', '1') else 'list'}"
                                    f":{q.get('resourceVersion', '')}:{q.get('continue', '')[:6]}")
                if q.get("watch") in ("true", "True", "1"):
                    rv = int(q.get("resourceVersion") or 0)
                    if rv < server.oldest_rv:
                        return self._status(410, "Expired", "The resourceVersion for the provided watch is too old.")
                    lines = b"".join(json.dumps(e).encode() + b"\n" for e in server.events.get(kind, [])
                                     if int(((e["object"].get("metadata") or {}).get("resourceVersion")) or 0) > rv)
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(lines)))
                    self.end_headers()
                    self.wfile.write(lines)
                    return
                items = server.lists.get(kind, [])
                start = int(base64.b64decode(q["continue"]).decode()) if q.get("continue") else 0
                limit = int(q.get("limit") or len(items) or 1)
                page = items[start:start + limit]
                meta = {"resourceVersion": server.list_rv}
                if start + limit < len(items):
                    meta["continue"] = base64.b64encode(str(start + limit).encode()).decode()
                    meta["remainingItemCount"] = len(items) - start - limit
                self._send(200, {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": page})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def core(self):
        from kubernetes import client

        config = client.Configuration()
        config.host = f"http://127.0.0.1:{self.port}"
        return client.CoreV1Api(client.ApiClient(config))

    def close(self) -> None:
        """Stop listening and cut the clients' kept-alive connections (else their handler threads keep
        serving them, and the "gone" apiserver still answers)."""
        import contextlib
        import socket

        self.httpd.shutdown()
        self.httpd.server_close()
        for conn in list(self.conns):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
