"""Evaluating a served model (issue 31, part 2): `--base-url` against a real OpenAI-compatible server started here on
127.0.0.1 (`transformers serve` on a tiny local model, no mock): greedy evaluation through the server gives what the
in-process evaluation gives, chat prompts and servers that ignore `n` work, errors are one line, the API key is never
written, and a server killed mid-evaluation resumes cleanly."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from divrl.cli import main as cli_main

BOOLEAN = ["--task", "hypospace-boolean", "--operators", "basic", "--split", "all", "--limit", "6",
           "--prompt-style", "base", "--max-new-tokens", "8", "--no-progress", "--save-completions"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """`transformers serve MODEL` on 127.0.0.1:PORT, started and stopped by the tests."""

    def __init__(self, model: Path, port: int) -> None:
        self.model, self.port, self.process = model, port, None
        self.url = f"http://127.0.0.1:{port}/v1"

    def start(self) -> None:
        command = [str(Path(sys.executable).with_name("transformers")), "serve", str(self.model), "--host",
                   "127.0.0.1", "--port", str(self.port), "--device", "cpu"]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2):
                    return
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError("transformers serve exited at start") from None
                time.sleep(0.5)
        raise RuntimeError("transformers serve did not answer within 120 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


@pytest.fixture()
def server(tiny_qwen3: Path) -> Iterator[Server]:
    running = Server(tiny_qwen3, _free_port())
    running.start()
    yield running
    running.stop()


def _completions(out: Path) -> list[list[str]]:
    (model,) = json.loads((out / "recovery.json").read_text())["models"]
    return [instance["completions"] for instance in model["instances"]]


def test_greedy_evaluation_through_the_server_matches_the_in_process_one(server: Server, tiny_qwen3: Path,
                                                                         tmp_path: Path) -> None:
    greedy = ["--temperature", "0", "--samples", "2"]
    assert cli_main(["eval", "recovery", "--model", str(tiny_qwen3), *BOOLEAN, *greedy,
                     "--out", str(tmp_path / "local")]) == 0
    assert cli_main(["eval", "recovery", "--base-url", server.url, "--model", str(tiny_qwen3), *BOOLEAN, *greedy,
                     "--out", str(tmp_path / "served")]) == 0
    local, served = (json.loads((tmp_path / name / "recovery.json").read_text()) for name in ("local", "served"))
    assert _completions(tmp_path / "local") == _completions(tmp_path / "served")
    for key in ("validity", "uniqueness", "recovery", "curve"):
        assert local["models"][0][key] == served["models"][0][key]
    assert served["sampling"]["backend"] == "served"


def test_sampled_chat_evaluation_gets_every_sample_and_never_writes_the_key(
        server: Server, tiny_qwen3: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SECRET_KEY", "sk-test-do-not-write")
    assert cli_main(["eval", "task", "--task", "countdown", "--task-arg", "instances=4", "--base-url", server.url,
                     "--api-key-env", "MY_SECRET_KEY", "--model", str(tiny_qwen3), "--samples", "3",
                     "--max-new-tokens", "4", "--no-progress", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "task_eval.json").read_text())
    assert result["prompt_style"] == "chat" and all(len(row["completions"]) == 3 for row in result["per_prompt"])
    assert not any("sk-test-do-not-write" in path.read_text() for path in tmp_path.rglob("*.json"))


def test_a_client_error_is_one_line(server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["eval", "task", "--task", "countdown", "--task-arg", "instances=4", "--base-url", server.url,
                     "--model", str(tmp_path / "no-such-model"), "--samples", "1", "--no-progress",
                     "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("divrl eval task: error:") and "answered 4" in err


def test_a_server_killed_mid_evaluation_resumes_cleanly(server: Server, tiny_qwen3: Path, tmp_path: Path) -> None:
    greedy = ["--temperature", "0", "--samples", "2", "--instances-per-call", "1"]
    assert cli_main(["eval", "recovery", "--model", str(tiny_qwen3), *BOOLEAN, *greedy,
                     "--out", str(tmp_path / "uninterrupted")]) == 0
    out = tmp_path / "resumed"
    command = [str(Path(sys.executable).with_name("divrl")), "eval", "recovery", "--base-url", server.url, "--model",
               str(tiny_qwen3), *BOOLEAN, *greedy, "--request-timeout", "5", "--out", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    evaluation = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:  # kill the server once the first instance is recorded
        partial = list((out / "partial").glob("*.jsonl")) if (out / "partial").is_dir() else []
        if partial and len(partial[0].read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    server.stop()
    _, stderr = evaluation.communicate(timeout=300)
    assert evaluation.returncode == 2 and "did not answer" in stderr.strip().splitlines()[-1], stderr[-3000:]
    assert not (out / "recovery.json").exists()
    server.start()
    assert cli_main(["eval", "recovery", "--base-url", server.url, "--model", str(tiny_qwen3), *BOOLEAN, *greedy,
                     "--out", str(out)]) == 0
    assert _completions(out) == _completions(tmp_path / "uninterrupted")
    assert json.loads((out / "recovery.json").read_text())["models"][0]["resumed_instances"] >= 1
    shutil.rmtree(out)


def test_an_answer_cut_short_is_retried_then_one_line(tmp_path: Path) -> None:
    """A server that dies while sending its answer (the body shorter than its Content-Length) is a connection
    failure like any other: retried, then a one-line ValueError, never a traceback from http.client."""
    import http.server
    import threading

    from divrl.sampling import SamplingConfig
    from divrl.served import ServedSampler

    class CutShort(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b'{"choices": [')  # then the connection closes

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), CutShort)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        sampler = ServedSampler(f"http://127.0.0.1:{httpd.server_port}/v1", "m", SamplingConfig(), retries=1)
        with pytest.raises(ValueError, match="did not answer after 2 attempts"):
            sampler._post("/completions", {"prompt": "x"})
    finally:
        httpd.shutdown()
