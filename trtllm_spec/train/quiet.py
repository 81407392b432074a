"""Third-party chatter kept out of the user's output at its source: what ModelOpt ``print``s while it converts and
exports (``Found base_model_path at model``, ... from modelopt/torch/speculative/plugins/hf_eagle.py) goes to the
``trtllm_spec.thirdparty`` logger at INFO, which the CLI shows only with ``--verbose``; and transformers' "`torch_dtype`
is deprecated" warning, raised by ModelOpt's exporter reading ``config.torch_dtype``
(modelopt/torch/export/plugins/hf_spec_export.py, ``_get_config_from_draft_or_base``), is dropped for that call only:
our own code sets ``dtype``."""

from __future__ import annotations

import contextlib
import io
import logging

THIRD_PARTY = logging.getLogger("trtllm_spec.thirdparty")


class _DropDeprecatedTorchDtype(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "`torch_dtype` is deprecated" not in record.getMessage()


class _Lines(io.TextIOBase):
    def __init__(self, source: str) -> None:
        self.source, self.buf = source, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.buf += text
        while "\n" in self.buf:
            line, self.buf = self.buf.split("\n", 1)
            if line.strip():
                THIRD_PARTY.info("%s: %s", self.source, line.rstrip())
        return len(text)

    def flush(self) -> None:
        if self.buf.strip():
            THIRD_PARTY.info("%s: %s", self.source, self.buf.rstrip())
        self.buf = ""


@contextlib.contextmanager
def modelopt_quiet():
    """Inside: ModelOpt's prints become ``trtllm_spec.thirdparty`` INFO lines; transformers' deprecation of
    ``torch_dtype`` (read by ModelOpt, not by us) is not printed."""
    filt = _DropDeprecatedTorchDtype()
    loggers = [logging.getLogger(n) for n in ("transformers.configuration_utils", "transformers.modeling_utils")]
    for lg in loggers:
        lg.addFilter(filt)
    sink = _Lines("modelopt")
    try:
        with contextlib.redirect_stdout(sink):
            yield
    finally:
        sink.flush()
        for lg in loggers:
            lg.removeFilter(filt)
