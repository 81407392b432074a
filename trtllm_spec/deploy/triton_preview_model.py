"""``model.py`` of the Triton preview repository (``trtllm-spec triton BUNDLE --preview reference``), copied
verbatim into ``<model>/1/model.py``. It runs inside Triton's python-backend stub, in the Triton venv (numpy < 2,
no torch, no trtllm-spec): the model itself runs in a worker process (``trtllm_spec.deploy.triton_worker``, our
venv's Python, named in ``1/preview.json``) that this file starts in ``initialize`` and stops in ``finalize``.

It serves the llmapi tensor contract of ``config.pbtxt`` the way NVIDIA's llmapi ``model.py`` does: one prompt
per request in ``text_input``; ``streaming`` sends one response per decoding step carrying the whole text so far
(``RequestOutput.outputs[0].text``) and flags the last one final; otherwise one final response; ``stop`` cancels
the requests of that request id; ``finish_reason`` / ``stop_reason`` when ``return_*`` asks, the timing and
speculation outputs when ``sampling_param_return_perf_metrics`` asks. Unlike upstream, every output carries the
data type ``config.pbtxt`` declares. Inputs the preview cannot honour are refused with an error response.
"""

import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
POLL_S = 0.25  # how often a request waiting on the worker looks whether its client is still there
# inputs the preview refuses when a request sets them to anything but their default
UNSUPPORTED = {"sampling_param_best_of": 1, "sampling_param_frequency_penalty": 0.0,
               "sampling_param_presence_penalty": 0.0, "return_cumulative_logprob": False}
PERF = ("arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns", "acceptance_rate",
        "total_accepted_draft_tokens", "total_draft_tokens")


class RequestError(Exception):
    pass


def _text(value, name):
    """A BYTES element as text: UTF-8, else a RequestError naming the input (never a traceback)."""
    if not isinstance(value, bytes):
        return str(value)
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(f"{name} is not UTF-8 text ({exc.reason} at byte {exc.start}): send the prompt and stop "
                           "strings as UTF-8") from None


def _is_cancelled(request):
    """Whether Triton cancelled the request (the client disconnected or cancelled its stream)."""
    try:
        return bool(request.is_cancelled())
    except Exception:  # noqa: BLE001 (a backend without request cancellation)
        return False


def _scalar(request, name, default=None):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    value = tensor.as_numpy().reshape(-1)
    if value.size != 1:
        raise RequestError(f"{name} must hold one value, got {value.size}")
    value = value[0]
    return value.item() if hasattr(value, "item") else value


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.dtypes = {o["name"]: pb_utils.triton_string_to_numpy(o["data_type"]) for o in config["output"]}
        folder = Path(args["model_repository"]) / args["model_version"]
        preview = json.loads((folder / "preview.json").read_text())
        python = os.environ.get("TRTLLM_SPEC_PYTHON") or preview["python"]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "VIRTUAL_ENV")}
        env["PYTHONPATH"] = preview["pythonpath"]
        bundle = (folder / preview["bundle"]).resolve()
        cmd = [python, "-m", "trtllm_spec.deploy.triton_worker", "--bundle", str(bundle),
               "--threads", str(int(preview.get("threads", 0)))]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
                                     bufsize=1)
        self.events = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            first = self.events.get(timeout=float(preview.get("load_timeout_s", 600)))
        except queue.Empty:
            self.proc.kill()
            raise pb_utils.TritonModelException(f"the preview worker did not load {bundle} within "
                                                f"{preview.get('load_timeout_s', 600)} s") from None
        if first is None or not first.get("ready"):
            self.proc.kill()
            why = (first or {}).get("error") or f"it exited with code {self.proc.wait()}"
            raise pb_utils.TritonModelException(f"the preview worker could not serve {bundle}: {why}")
        self.info = first
        self.next_id = 0
        self.cancelled = set()  # Triton request ids a 'stop' request named
        self.lock = threading.Lock()
        self.work = queue.Queue()
        self.running = True
        if self.decoupled:
            self.thread = threading.Thread(target=self._serve, daemon=True)
            self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.events.put(json.loads(line))
            except ValueError:
                continue
        self.events.put(None)  # the worker exited

    # -- requests -------------------------------------------------------------------------------------------
    def _parse(self, request):
        tensor = pb_utils.get_input_tensor_by_name(request, "text_input")
        if tensor is None:
            raise RequestError("text_input is missing from the request")
        texts = tensor.as_numpy().reshape(-1)
        if texts.size != 1:
            raise RequestError(f"text_input must hold one prompt, got {texts.size}")
        text = _text(texts[0], "text_input")
        if not text:
            raise RequestError("text_input is empty: send one non-empty prompt string")
        for name, default in UNSUPPORTED.items():
            value = _scalar(request, name, default)
            if value != default:
                raise RequestError(f"{name}={value!r} is not available in the CPU preview (only on the GPU node "
                                   f"with TensorRT-LLM); leave it at {default!r}")
        stops = pb_utils.get_input_tensor_by_name(request, "sampling_param_stop")
        stops = [_text(s, "sampling_param_stop") for s in (stops.as_numpy().reshape(-1) if stops is not None else [])]
        req = {"text": text, "stop": stops, "stream": bool(_scalar(request, "streaming", False)),
               "max_tokens": int(_scalar(request, "sampling_param_max_tokens", 32)),
               "temperature": float(_scalar(request, "sampling_param_temperature", 0.0)),
               "top_k": int(_scalar(request, "sampling_param_top_k", 0)),
               "top_p": float(_scalar(request, "sampling_param_top_p", 1.0)),
               "seed": int(_scalar(request, "sampling_param_seed", 0))}
        want = {"exclude_input": bool(_scalar(request, "sampling_param_exclude_input_from_output", True)),
                "finish_reason": bool(_scalar(request, "return_finish_reason", False)),
                "stop_reason": bool(_scalar(request, "return_stop_reason", False)),
                "perf": bool(_scalar(request, "sampling_param_return_perf_metrics", False))}
        return req, want

    def _response(self, event, want, arrival_ns):
        def tensor(name, values):
            return pb_utils.Tensor(name, np.asarray(values, dtype=self.dtypes[name]))

        text = event["text"] if want["exclude_input"] else want["prompt"] + event["text"]
        out = [tensor("text_output", [text.encode("utf-8")])]
        if want["finish_reason"]:
            out.append(tensor("finish_reason", [str(event.get("finish_reason")).encode()]))
        if want["stop_reason"]:
            out.append(tensor("stop_reason", [str(event.get("stop_reason")).encode()]))
        if want["perf"]:
            drafted, accepted = int(event.get("drafted", 0)), int(event.get("accepted", 0))
            first = int(event.get("first_token_ns") or 0)
            values = {"arrival_time_ns": arrival_ns, "first_scheduled_time_ns": arrival_ns,
                      "first_token_time_ns": first, "last_token_time_ns": int(event.get("last_token_ns") or 0),
                      "acceptance_rate": accepted / drafted if drafted else 0.0,
                      "total_accepted_draft_tokens": accepted, "total_draft_tokens": drafted}
            out += [tensor(name, [values[name]]) for name in PERF]
        return pb_utils.InferenceResponse(output_tensors=out)

    @staticmethod
    def _error(message, code=None):
        error = pb_utils.TritonError(message) if code is None else pb_utils.TritonError(message, code)
        return pb_utils.InferenceResponse(error=error)

    def _tell(self, message):
        """One line to the worker (requests from the serving thread, cancellations)."""
        with self.lock:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()

    def _run(self, request, send):
        """Serve one request; ``send(response, final)`` returns False when the client can no longer be reached. A
        request whose client disconnected, cancelled it or named it in a ``stop`` request is cancelled in the
        worker too (it stops at its next decoding step), so the next request does not wait for it."""
        arrival_ns = time.time_ns()
        try:
            req, want = self._parse(request)
        except (RequestError, ValueError, TypeError) as exc:
            send(self._error(str(exc)), True)
            return
        if req["stream"] and not self.decoupled:
            send(self._error("Streaming is only supported in decoupled mode."), True)
            return
        want["prompt"] = req["text"]
        with self.lock:
            rid = self.next_id
            self.next_id += 1
        user_id = request.request_id()

        def gone():
            return bool(user_id and user_id in self.cancelled) or _is_cancelled(request)

        if gone():
            send(self._error("Request cancelled by client", pb_utils.TritonError.CANCELLED), True)
            return
        self._tell({"id": rid, **req})
        while True:
            try:
                event = self.events.get(timeout=POLL_S)
            except queue.Empty:
                event = {}
            if event is None:
                self.events.put(None)  # every later request learns it too
                send(self._error("the preview worker exited; see Triton's log"), True)
                return
            if gone():
                self._tell({"cancel": rid})
                send(self._error("Request cancelled by client", pb_utils.TritonError.CANCELLED), True)
                return
            if event.get("id") != rid:
                continue
            if event.get("error"):
                send(self._error(event["error"]), True)
                return
            sendable = req["stream"] or event.get("final")
            if sendable and not send(self._response(event, want, arrival_ns), bool(event.get("final"))):
                self._tell({"cancel": rid})  # the client is gone: stop decoding for it
                return
            if event.get("final"):
                return

    def _serve(self):
        while self.running:
            request = self.work.get()
            if request is None:
                return
            sender = request.get_response_sender()

            def send(response, final, s=sender):
                try:
                    s.send(response, flags=FINAL if final else 0)
                    return True
                except Exception:  # noqa: BLE001 (a client that disconnected: nothing to send it)
                    return False

            try:
                self._run(request, send)
            except Exception as exc:  # noqa: BLE001 (the client gets the reason, the model keeps serving)
                send(self._error(f"Error generating request: {exc}"), True)
            finally:
                self.cancelled.discard(request.request_id())  # a stop applies to the requests it found

    def execute(self, requests):
        if not self.decoupled:
            responses = []
            for request in requests:
                got = []
                self._run(request, lambda response, final, g=got: g.append(response) or True)
                responses.append(got[-1])
            return responses
        for request in requests:
            if _scalar(request, "stop", False):
                user_id = request.request_id()
                sender = request.get_response_sender()
                if not user_id:
                    sender.send(self._error("A request id must be provided for request cancellation"), flags=FINAL)
                    continue
                self.cancelled.add(user_id)
                sender.send(self._error("Request cancelled by client", pb_utils.TritonError.CANCELLED),
                            flags=FINAL)
                continue
            self.work.put(request)
        return None

    def finalize(self):
        self.running = False
        if self.decoupled:
            self.work.put(None)
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001
            self.proc.kill()
