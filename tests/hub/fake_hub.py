#!/usr/bin/env python3
"""A stand-in for the Hugging Face hub on loopback, for kiln's download tests.

It serves one model repository (the files of a local directory, e.g. one `kiln init` wrote) the
way the hub's API answers huggingface_hub and @huggingface/hub:

  GET  /api/models/ORG/NAME[/revision/REV][?blobs=true]   sha, siblings (blobId, size, lfs.sha256)
  GET  /api/models/ORG/NAME/tree/REV[/PATH]               the JS client's listFiles
  POST /api/models/ORG/NAME/paths-info/REV                the JS client's pathsInfo
  HEAD|GET /ORG/NAME/resolve/REV/FILE                      X-Repo-Commit, ETag; an LFS file (*.safetensors)
       answers 302 to /lfs-storage/SHA256 with X-Linked-Etag and X-Linked-Size, as the hub sends LFS
       files to its storage; Range: bytes=N- answers 206 with Content-Range
Refusals carry X-Error-Code as the hub's do: RepoNotFound (401), RevisionNotFound (404),
EntryNotFound (404), GatedRepo (401).

Fault switches: --cut FILE:N (the first GET of FILE's bytes is cut after N bytes), --corrupt FILE
(one byte of FILE always flipped), --token T (a gated repo: every request needs "Bearer T"),
--busy-once (the first resolve answers 429 with Retry-After: 0).
Each request is appended to --log as a JSON line (method, path, range, auth). The chosen port is
written to --port-file. The server stops by itself after --lifetime seconds.
"""
import argparse
import hashlib
import json
import os
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, root: str, repo_id: str):
        self.id = repo_id
        self.files = {}  # path -> bytes
        for dirpath, _, names in os.walk(root):
            for n in names:
                full = os.path.join(dirpath, n)
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                with open(full, "rb") as f:
                    self.files[rel] = f.read()
        digest = hashlib.sha1()
        for p in sorted(self.files):
            digest.update(p.encode() + b"\0" + git_blob_id(self.files[p]).encode())
        self.sha = digest.hexdigest()
        self.revisions = {"main": self.sha, "v1.0": self.sha, self.sha: self.sha}

    @staticmethod
    def is_lfs(path: str) -> bool:
        return path.endswith(".safetensors")

    def sibling(self, path: str, blobs: bool) -> dict:
        data = self.files[path]
        s = {"rfilename": path}
        if blobs:
            s["size"] = len(data)
            s["blobId"] = git_blob_id(data)
            if self.is_lfs(path):
                s["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                            "pointerSize": 134}
        return s

    def path_info(self, path: str) -> dict:
        data = self.files[path]
        info = {"type": "file", "path": path, "size": len(data), "oid": git_blob_id(data),
                "lastCommit": {"id": self.sha, "title": "kiln test", "date": "2026-01-01T00:00:00.000Z"}}
        if self.is_lfs(path):
            info["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                           "pointerSize": 134}
        return info

    def etag(self, path: str) -> str:
        data = self.files[path]
        return hashlib.sha256(data).hexdigest() if self.is_lfs(path) else git_blob_id(data)


def make_handler(repo: Repo, opts, state):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def handle(self):
            try:
                super().handle()
            except (ConnectionResetError, BrokenPipeError):
                pass  # kiln stopped a transfer (another file failed): not the server's error

        def record(self):
            entry = {"method": self.command, "path": self.path,
                     "range": self.headers.get("Range"),
                     "auth": self.headers.get("Authorization") is not None}
            with state["lock"]:
                with open(opts.log, "a") as f:
                    f.write(json.dumps(entry) + "\n")

        def refuse(self, status: int, code: str, message: str):
            body = json.dumps({"error": message}).encode()
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def send_json(self, obj, extra=None):
            body = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def authorised(self) -> bool:
            if opts.token and self.headers.get("Authorization") != "Bearer " + opts.token:
                self.refuse(401, "GatedRepo",
                            f"Access to model {repo.id} is restricted. You must have access to it "
                            "and be authenticated to access it. Please log in.")
                return False
            return True

        def do_HEAD(self):
            self.handle_any()

        def do_GET(self):
            self.handle_any()

        def do_POST(self):
            self.handle_any()

        def handle_any(self):
            self.record()
            url = urllib.parse.urlsplit(self.path)
            path = urllib.parse.unquote(url.path)
            query = urllib.parse.parse_qs(url.query)
            if path.startswith("/lfs-storage/"):
                return self.serve_blob(path[len("/lfs-storage/"):])
            if path.startswith("/api/models/"):
                return self.api(path[len("/api/models/"):], query)
            parts = path.lstrip("/").split("/", 4)
            if len(parts) == 5 and parts[2] == "resolve":
                return self.resolve("/".join(parts[:2]), parts[3], parts[4])
            self.refuse(404, "EntryNotFound", f"no route {path}")

        def repo_and_rev(self, repo_id: str, rev: str):
            if repo_id != repo.id:
                self.refuse(401, "RepoNotFound", f"Repository Not Found for url: {self.path}.")
                return None
            if not self.authorised():
                return None
            if rev not in repo.revisions:
                self.refuse(404, "RevisionNotFound", f"Invalid rev id: {rev}")
                return None
            return repo.revisions[rev]

        def api(self, rest: str, query):
            segs = rest.split("/")
            repo_id = "/".join(segs[:2])
            tail = segs[2:]
            if not tail or tail[0] == "revision":
                rev = tail[1] if len(tail) > 1 else "main"
                sha = self.repo_and_rev(repo_id, rev)
                if sha is None:
                    return
                blobs = query.get("blobs", ["false"])[0] == "true"
                siblings = [repo.sibling(p, blobs) for p in sorted(repo.files)]
                return self.send_json({"_id": "0" * 24, "id": repo.id, "modelId": repo.id,
                                       "sha": sha, "private": False,
                                       "gated": "manual" if opts.token else False,
                                       "siblings": siblings}, {"X-Repo-Commit": sha})
            if tail[0] in ("tree", "paths-info"):
                sha = self.repo_and_rev(repo_id, tail[1])
                if sha is None:
                    return
                if tail[0] == "tree":
                    prefix = "/".join(tail[2:])
                    listed = [repo.path_info(p) for p in sorted(repo.files)
                              if not prefix or p.startswith(prefix + "/")]
                    return self.send_json(listed)
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
                if self.headers.get("Content-Type", "").startswith("application/json"):
                    wanted = json.loads(raw or "{}").get("paths", [])  # @huggingface/hub
                else:
                    wanted = urllib.parse.parse_qs(raw).get("paths", [])  # huggingface_hub's form
                return self.send_json([repo.path_info(p) for p in wanted if p in repo.files])
            self.refuse(404, "EntryNotFound", f"no route /api/models/{rest}")

        def resolve(self, repo_id: str, rev: str, file: str):
            sha = self.repo_and_rev(repo_id, rev)
            if sha is None:
                return
            if file not in repo.files:
                return self.refuse(404, "EntryNotFound", f"{file} does not exist on {rev}")
            if opts.busy_once:
                with state["lock"]:
                    busy, state["busy_done"] = not state.get("busy_done"), True
                if busy:
                    self.send_response(429)
                    self.send_header("Retry-After", "0")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
            data = repo.files[file]
            if repo.is_lfs(file):
                self.send_response(302)
                self.send_header("Location", "/lfs-storage/" + repo.etag(file) + "?file=" +
                                 urllib.parse.quote(file))
                self.send_header("X-Repo-Commit", sha)
                self.send_header("X-Linked-Etag", '"' + repo.etag(file) + '"')
                self.send_header("X-Linked-Size", str(len(data)))
                self.send_header("ETag", '"' + git_blob_id(data) + '"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_bytes(file, data, {"X-Repo-Commit": sha, "ETag": '"' + repo.etag(file) + '"'})

        def serve_blob(self, rest: str):
            etag = rest.split("?", 1)[0]
            for p in repo.files:
                if repo.is_lfs(p) and repo.etag(p) == etag:
                    return self.send_bytes(p, repo.files[p], {"ETag": '"' + etag + '"'})
            self.refuse(404, "EntryNotFound", "no such object")

        def send_bytes(self, file: str, data: bytes, headers: dict):
            if opts.corrupt == file:
                data = bytearray(data)
                data[len(data) // 2] ^= 0xFF
                data = bytes(data)
            start, end = 0, len(data) - 1
            rng = self.headers.get("Range")  # "bytes=N-" (a resume) or "bytes=A-B" (a probe)
            if rng and rng.startswith("bytes="):
                first, _, last = rng[len("bytes="):].partition("-")
                start = int(first)
                end = min(int(last), len(data) - 1) if last else len(data) - 1
                if start >= len(data) or end < start:
                    return self.refuse(416, "RangeNotSatisfiable", "range not satisfiable")
            self.send_response(206 if rng else 200)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(end + 1 - start))
            if rng:
                self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
            self.end_headers()
            if self.command == "HEAD":
                return
            body = data[start:end + 1]
            cut_file, _, cut_at = (opts.cut or "::").partition(":")
            with state["lock"]:
                cut = cut_file == file and not state.get("cut_done") and int(cut_at) < len(body)
                if cut:
                    state["cut_done"] = True
            if cut:
                self.wfile.write(body[:int(cut_at)])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
                return
            self.wfile.write(body)

    return Handler


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--cut")
    ap.add_argument("--corrupt")
    ap.add_argument("--token")
    ap.add_argument("--busy-once", action="store_true")
    ap.add_argument("--lifetime", type=float, default=120)
    opts = ap.parse_args()
    repo = Repo(opts.root, opts.repo)
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(repo, opts, {"lock": threading.Lock()}))
    server.daemon_threads = True
    threading.Timer(opts.lifetime, server.shutdown).start()
    tmp = opts.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(tmp, opts.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
