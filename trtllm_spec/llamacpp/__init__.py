"""llama.cpp as a second engine for our drafters: its native binaries built from the sources vendored in the
``llama-cpp-python`` sdist (``build``), GGUF conversion of targets and drafters with its own converter
(``convert``), and its speculative decoding run on our suites (``engine``), served or measured."""
