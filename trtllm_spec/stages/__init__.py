"""The stage layer: one module per stage of ``trtllm-spec build``, in order (docs/architecture.md):

  1 resolve    target and shape                     6 bundle    TensorRT-LLM options, drafter, scripts (engine)
  2 quantize   optional ModelOpt PTQ                 7 triton    the Triton model repository
  3 drafter    reuse | convert | train | native      8 report    the overhead report
  4 measure    acceptance on speed-lite              9 trtllm    validate + warm up where TensorRT-LLM exists
  5 plan       D and draft_len_schedule

plus ``data`` (training conversations), ``pipeline`` (build = the stages in order), ``cache`` (the one cache
protocol), ``checks`` (cross-checks of a recipe's inputs) and ``context`` (what stages pass each other).
Every CLI command calls the same stage function ``build`` calls; ``cli/`` only parses, prints and maps
errors. Stages may import every component package; no component imports a stage.
"""
