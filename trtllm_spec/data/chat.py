"""Conversations -> token ids with an assistant-token mask, through the target's own chat template.

Assistant spans are found by rendering the conversation turn by turn: the tokens between "everything before
this assistant turn, with the generation prompt" and "everything up to and including this turn" are the
assistant's (its end-of-turn token included, so the drafter learns to predict it). Needs a tokenizer whose
chat template renders prefixes as token prefixes, which every template we ship checks at load.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trtllm_spec.errors import DependencyMissing, UserError


@dataclass
class Tokenized:
    input_ids: list[int]
    assistant: list[int]  # 1 where the token was written by the assistant


def load_tokenizer(folder: str | Path, chat_template: str | Path | None = None):
    """The target's tokenizer; a chat template is required (given here, or in the checkpoint)."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise DependencyMissing("tokenizers need transformers: pip install 'trtllm-spec[train]'") from None
    try:
        tok = AutoTokenizer.from_pretrained(str(folder))
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot load a tokenizer from {folder} ({str(exc).splitlines()[0]}); the checkpoint "
                        "needs tokenizer.json / tokenizer_config.json") from None
    source = f"the chat template of {folder}"
    if chat_template is not None:
        p = Path(chat_template)
        if not p.is_file():
            raise UserError(f"chat template file {p} does not exist")
        try:
            tok.chat_template = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"chat template file {p} cannot be read as UTF-8 text ({exc}); save it as UTF-8") from None
        source = f"chat template file {p}"
    if not tok.chat_template:
        raise UserError(f"the tokenizer in {folder} has no chat template; supply one with "
                        "target.chat_template: path/to/template.jinja (a Jinja file as in tokenizer_config.json)")
    templates = tok.chat_template if isinstance(tok.chat_template, dict) else {"": tok.chat_template}
    for text in templates.values():
        refuse_loads(text, source)
    tok._trtllm_spec_template = source
    _apply(tok, [{"role": "user", "content": "Hello."}], add_generation_prompt=True, tokenize=True)  # renders at all
    return tok


def refuse_loads(text: str, source: str) -> None:
    """A chat template is one self-contained file: one that includes, imports or extends another template is
    refused, naming ``source`` and what it tried (transformers renders templates in jinja2's
    ImmutableSandboxedEnvironment without a loader, so such a statement could read nothing, but it fails deep
    inside the render). A template that does not parse is left to the render, which names the line."""
    try:
        import jinja2
        from jinja2 import nodes
        from jinja2.ext import Extension
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        return

    class Generation(Extension):  # transformers' {% generation %} ... {% endgeneration %} tag: parsed, not run
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body).set_lineno(lineno)

    try:
        tree = ImmutableSandboxedEnvironment(extensions=[Generation, "jinja2.ext.loopcontrols"]).parse(text)
    except jinja2.TemplateSyntaxError:
        return
    for node in tree.find_all((nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)):
        verb = {nodes.Include: "include", nodes.Import: "import", nodes.FromImport: "import from",
                nodes.Extends: "extend"}[type(node)]
        what = node.template.value if isinstance(node.template, nodes.Const) else "a computed template name"
        raise UserError(f"{source} tries to {verb} {what!r} (line {node.lineno}): chat templates are rendered "
                        "sandboxed and may not include, import or extend other templates; inline what it needs")


def _apply(tok, messages: list[dict], **kw):
    """``tok.apply_chat_template`` with a template that does not parse, reads an undefined name, calls what the
    sandbox blocks (transformers renders in jinja2's ImmutableSandboxedEnvironment) or raises on the messages
    turned into one line naming the template and the problem."""
    try:
        import jinja2
    except ImportError:  # transformers needs jinja2 for chat templates; without it the call below says so
        jinja2 = None
    errors = (jinja2.TemplateError,) if jinja2 is not None else ()
    try:
        return tok.apply_chat_template(messages, **kw)
    except errors as exc:
        where = getattr(tok, "_trtllm_spec_template", "the chat template")
        line = f" (line {exc.lineno})" if getattr(exc, "lineno", None) else ""
        what = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise UserError(f"{where} cannot render a conversation{line}: {type(exc).__name__}: {what}; fix the "
                        "template (or give a standard one with target.chat_template / --chat-template)") from None


def prompt_ids(tok, messages: list[dict], template_kwargs: dict | None = None) -> list[int]:
    """Token ids of ``messages`` followed by the assistant generation prompt; ``template_kwargs`` (the request
    mode's chat-template arguments, checked with ``check_template_kwargs``) are passed to the template."""
    return _ids(_apply(tok, messages, add_generation_prompt=True, tokenize=True, **(template_kwargs or {})))


def template_variables(tok) -> set[str]:
    """The names the chat template reads from its context (jinja2's AST: ``meta.find_undeclared_variables``),
    i.e. the arguments ``apply_chat_template(**kwargs)`` can change."""
    import jinja2
    from jinja2 import meta

    try:
        ast = jinja2.Environment().parse(tok.chat_template)
    except jinja2.TemplateSyntaxError as exc:
        where = getattr(tok, "_trtllm_spec_template", "the chat template")
        raise UserError(f"{where} does not parse (line {exc.lineno}: {exc.message})") from None
    return set(meta.find_undeclared_variables(ast))


def check_template_kwargs(tok, template_kwargs: dict | None) -> None:
    """Refuse a request-mode chat-template argument the target's template never reads (it would be accepted and
    ignored: e.g. enable_thinking with SmolLM2's template), naming the ones it does read."""
    if not template_kwargs:
        return
    names = template_variables(tok)
    bad = sorted(k for k in template_kwargs if k not in names)
    if bad:
        where = getattr(tok, "_trtllm_spec_template", "the chat template")
        reads = sorted(names - {"messages", "add_generation_prompt", "bos_token", "eos_token", "raise_exception"})
        raise UserError(f"chat-template argument {', '.join(bad)}: {where} does not read it (it reads "
                        f"{', '.join(reads) or 'no extra argument'}); drop it from the request mode "
                        "(workload.request_mode.chat_template_kwargs / --chat-template-arg)")


def prompt_token_counter(tok):
    """``text -> tokens the target prefills`` for a one-turn prompt: the chat template's frame included (what
    ``data.max_prompt_tokens`` limits; SmolLM2's frame, its default system prompt, is 30 tokens)."""
    return lambda text: len(prompt_ids(tok, [{"role": "user", "content": text}]))


def _ids(out) -> list[int]:
    if hasattr(out, "keys"):
        out = out["input_ids"]
    return list(out)


def tokenize_conversation(tok, messages: list[dict], max_len: int | None = None,
                          template_kwargs: dict | None = None) -> Tokenized:
    """All turns with an assistant mask. Raises if the template does not render prefixes as prefixes.
    ``template_kwargs``: the chat-template arguments the conversation was regenerated with (its request mode)."""
    problem = message_problem(messages)
    if problem:
        raise UserError(f"a conversation's {problem}; each line needs \"messages\": [{{\"role\": ..., "
                        "\"content\": ...}, ...]")
    kw = template_kwargs or {}
    ids: list[int] = []
    mask: list[int] = []
    for i, msg in enumerate(messages):
        if msg["role"] != "assistant":
            continue
        before = prompt_ids(tok, messages[:i], kw)
        upto = _ids(_apply(tok, messages[: i + 1], tokenize=True, **kw))
        if before[: len(ids)] != ids or upto[: len(before)] != before:
            raise UserError("the chat template does not render earlier turns as a token prefix of later ones; "
                            "cannot locate assistant tokens (supply a standard template via target.chat_template)")
        mask += [0] * (len(before) - len(ids)) + [1] * (len(upto) - len(before))
        ids = upto
    if max_len is not None:
        ids, mask = ids[:max_len], mask[:max_len]
    return Tokenized(ids, mask)


def message_problem(messages) -> str | None:
    """What is wrong with a conversation's ``messages`` (a list of {role, content} objects, strings both), or None."""
    def got(v) -> str:
        return f"got {type(v).__name__} {str(v)[:40]!r}"

    if not isinstance(messages, list):
        return f"messages is not a list of turns ({got(messages)})"
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            return f"messages[{i}] is not an object with role and content ({got(m)})"
        for key in ("role", "content"):
            if not isinstance(m.get(key), str):
                return f"messages[{i}].{key} is not a string ({'missing' if key not in m else got(m[key])})"
    return None


# How ``recipe_training_items`` selects prompts; part of the drafter stage's cache key, so a cached drafter trained
# on prompts another rule selected (before this one: 4 characters a token) is not reused for the same recipe.
PROMPT_RULE = "first turn <= data.max_prompt_tokens of the target's tokens, chat template included; passages cut"


def recipe_training_items(recipe, target_dir: str | Path):
    """The training prompts ``recipe``'s ``drafter.training.data`` selects, each first turn at most
    ``data.max_prompt_tokens`` as the target at ``target_dir`` tokenizes it, chat template included (passages cut
    to fit; ``suite.training_items``). The first rendering gets 8 characters per token (the most in the
    CPU default's 160 prompts at 160 tokens was 5.8 per token of the request, SmolLM2's tokenizer:
    ``benchmarks/decisions/prompt_tokens.py``)."""
    from trtllm_spec.data.suite import training_items

    d = recipe.drafter.training.data
    tok = load_tokenizer(target_dir, recipe.resolve_path(recipe.target.chat_template))
    return training_items(d.sources, d.num_conversations, d.seed, max_prompt_chars=8 * d.max_prompt_tokens,
                          prompt_tokens=prompt_token_counter(tok), max_prompt_tokens=d.max_prompt_tokens)
