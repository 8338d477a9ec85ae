"""A minimal Kubernetes API server for the controllers' unit tests (the integration tier runs the real one).

Kept for what is fast in-process and what the tier's 1.36 apiserver cannot show: creating the 1.37
``scheduling.k8s.io/v1beta1`` PodGroups of the native pod-group backend, and Pods with the init
container statuses a kubelet would write (the tier has no kubelet) for the preflight status.

It speaks the real wire protocol the official ``kubernetes`` client uses (JSON over HTTP, Status
objects for errors) with the semantics that matter for a controller: 404 for absent objects, 409 on
create of an existing name and on update with a stale ``resourceVersion``, increasing
resourceVersions, JSON merge patches, and the ``status`` subresource (a PUT there changes only the
status, as a kubelet's writes do). Objects are stored as the JSON the client sent.
"""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COLLECTIONS = {"secrets", "leases", "mutatingwebhookconfigurations", "validatingwebhookconfigurations", "jobs",
               "podgroups", "pods", "events", "pytorchjobs", "reports", "policyreports", "resourcequotas", "namespaces"}


def selected(selector: str, labels: dict) -> bool:
    """A label selector of ``key`` and ``key=value`` terms (what the controllers here send)."""
    for term in filter(None, selector.split(",")):
        key, eq, value = term.partition("=")
        if key not in labels or (eq and labels[key] != value):
            return False
    return True


def merge_patch(target: object, patch: object) -> object:
    """RFC 7386 JSON merge patch: maps merge, null deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


class JSONHandler(BaseHTTPRequestHandler):
    """HTTP plumbing shared by the fake apiservers: JSON bodies and Kubernetes Status errors."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else each reply on a kept-open connection waits ~40 ms for a delayed ACK

    def log_message(self, *args) -> None:
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str, message: str) -> None:
        self._send(code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                          "message": message, "reason": reason, "code": code})


class FakeAPIServer:
    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}
        self.version = 100
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []
        server = self

        class Handler(JSONHandler):
            def _body(self) -> dict:
                return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

            def _route(self):
                path = self.path.split("?")[0].rstrip("/")
                server.requests.append((self.command, path))
                last = path.rsplit("/", 1)[-1]
                return path, last in COLLECTIONS

            def do_GET(self) -> None:
                path, is_collection = self._route()
                if is_collection:
                    return self._list(path)
                with server.lock:
                    obj = server.objects.get(path)
                if obj is None:
                    return self._status(404, "NotFound", f"{path} not found")
                self._send(200, obj)

            def _list(self, path: str) -> None:
                query = self.path.partition("?")[2]
                selector = next((v for k, _, v in (p.partition("=") for p in query.split("&"))
                                 if k == "labelSelector"), "")
                from urllib.parse import unquote

                selector = unquote(selector)
                kind = path.rsplit("/", 1)[-1]
                with server.lock:
                    items = [o for p, o in sorted(server.objects.items())
                             if p.rsplit("/", 2)[-2] == kind and (p.startswith(path + "/") or
                                                                   "/namespaces/" not in path)
                             and p.startswith(path.split("/" + kind)[0])
                             and selected(selector, o.get("metadata", {}).get("labels") or {})]
                self._send(200, {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": str(server.version)},
                                 "items": items})

            def do_POST(self) -> None:
                path, _ = self._route()
                body = self._body()
                name = body["metadata"]["name"]
                key = f"{path}/{name}"
                with server.lock:
                    if key in server.objects:
                        return self._status(409, "AlreadyExists", f"{name} already exists")
                    server.version += 1
                    body["metadata"].update(resourceVersion=str(server.version), uid=str(uuid.uuid4()),
                                            creationTimestamp="2026-11-29T00:00:00Z")
                    server.objects[key] = body
                self._send(201, body)

            def do_PUT(self) -> None:
                path, _ = self._route()
                body = self._body()
                subresource = path.endswith("/status")
                path = path.removesuffix("/status")
                with server.lock:
                    current = server.objects.get(path)
                    if current is None:
                        return self._status(404, "NotFound", f"{path} not found")
                    if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                        return self._status(409, "Conflict", "the object has been modified; please apply your "
                                                             "changes to the latest version and try again")
                    if subresource:  # only the status changes
                        body = {**current, "status": body.get("status"), "metadata": dict(current["metadata"])}
                    server.version += 1
                    body["metadata"]["resourceVersion"] = str(server.version)
                    server.objects[path] = body
                self._send(200, body)

            def do_DELETE(self) -> None:
                path, _ = self._route()
                with server.lock:
                    gone = server.objects.pop(path, None)
                    if gone is not None:
                        server.version += 1
                if gone is None:
                    return self._status(404, "NotFound", f"{path} not found")
                self._send(200, gone)  # as the apiserver answers a delete without finalizers: the object

            def do_PATCH(self) -> None:
                path, _ = self._route()
                if self.headers.get("Content-Type") != "application/merge-patch+json":
                    return self._status(415, "UnsupportedMediaType", f"{self.headers.get('Content-Type')} is not "
                                                                     "served here")
                patch = self._body()
                with server.lock:
                    current = server.objects.get(path)
                    if current is None:
                        return self._status(404, "NotFound", f"{path} not found")
                    body = merge_patch(current, patch)
                    server.version += 1
                    body["metadata"]["resourceVersion"] = str(server.version)
                    server.objects[path] = body
                self._send(200, body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def put_raw(self, path: str, obj: dict) -> None:
        with self.lock:
            self.version += 1
            obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
            self.objects[path] = obj

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
