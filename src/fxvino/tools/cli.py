"""The ``fxvino`` command: ``ops`` (what lowers), ``explain`` (what ran where), ``export-llm``, ``demo``."""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

import torch


def _ops(args: argparse.Namespace) -> int:
    if args.markdown:
        return _ops_markdown(args)
    from fxvino.lowering import ensure_registered
    from fxvino.lowering.registry import all_entries, op_name
    from fxvino.tools.op_coverage import core_aten_ops

    ensure_registered()
    core = core_aten_ops()
    by_family: dict[str, list[str]] = defaultdict(list)
    for target, entry in all_entries().items():
        by_family[entry.family].append(op_name(target) + (" (validated)" if entry.validator else ""))
    for family in sorted(by_family):
        print(f"{family} ({len(by_family[family])})")
        for name in sorted(by_family[family]):
            print(f"  {name}")
    lowered = {op_name(t) for t, e in all_entries().items() if e.family != "declined"}
    declined = {op_name(t) for t, e in all_entries().items() if e.family == "declined"}
    missing = sorted(core - lowered - declined)
    print(
        f"\nCore ATen overloads: {len(core)}; lowered: {len(core & lowered)}; "
        f"declined on purpose: {len(core & declined)}; not lowered yet: {len(missing)}"
    )
    if args.missing:
        print("\n".join(f"  {m}" for m in missing))
    return 0


def _ops_markdown(args: argparse.Namespace) -> int:
    """docs/ops.md: one row per op from the registry and the last conformance run's summary."""
    from pathlib import Path

    from fxvino.tools import op_coverage as coverage

    summary = Path(args.conformance) if args.conformance else coverage.DEFAULT_SUMMARY
    if not summary.exists():
        raise SystemExit(f"{summary}: no conformance summary (FXVINO_CONFORMANCE_SUMMARY, tests/conformance/README.md)")
    cases, about = coverage.load_summary(summary), coverage.summary_about(summary)
    rows = coverage.ops_rows(cases, coverage.dynamic_ops())
    Path(args.markdown).write_text(coverage.markdown(rows, cases, about))
    print(f"wrote {args.markdown}: {len(rows)} ops")
    return 0


def _explain(args: argparse.Namespace) -> int:
    import fxvino
    from fxvino.tools import zoo

    model, inputs = zoo.build(args.model)
    options = {"precision": args.precision}
    print(fxvino.explain(model, *inputs, options=options, dynamic=args.dynamic or None))
    return 0


def _graph(args: argparse.Namespace) -> int:
    from fxvino.tools import exec_graph as graph_quality
    from fxvino.tools import zoo

    kwargs: dict[str, object] = {}
    if args.layers is not None:
        if args.model not in ("bert", "gpt2"):
            raise SystemExit(f"--layers applies to bert and gpt2, not {args.model}")
        kwargs["num_hidden_layers" if args.model == "bert" else "n_layer"] = args.layers
    model, inputs = zoo.comparable(args.model, **kwargs)
    torch.set_num_threads(2)
    precisions = args.precisions or args.int8
    if args.int8:
        print(f"quantizing {args.model} to int8 (PT2E, x86 quantizer)...", file=sys.stderr)
        model = graph_quality.pt2e_int8(model, inputs, fold_quantize=False)
    print(f"compiling {args.model} with fxvino ({args.precision})...", file=sys.stderr)
    ours, work, report = graph_quality.fxvino_runtime(model, inputs, {"precision": args.precision}, precisions)
    native = None
    if not args.no_native:
        print("converting it natively (ov.convert_model)...", file=sys.stderr)
        native = graph_quality.native_runtime(model, inputs, args.precision, precisions)
    print(report)
    print(graph_quality.format_comparison(ours, native, work))
    return 1 if work else 0


def _cache(args: argparse.Namespace) -> int:
    import datetime as dt
    from pathlib import Path

    from fxvino.cache.store import ASIDE_STRIKES, ModelCache
    from fxvino.options import default_cache_dir
    from fxvino.utils.sizes import format_size

    root = Path(args.dir).expanduser() if args.dir else default_cache_dir()
    cache = ModelCache(root)
    if args.action == "clear":
        aside = sum(1 for _, r in cache.asides() if _strikes(r) >= ASIDE_STRIKES)
        n = cache.clear()
        forgot = f"; forgot {aside} graph(s) set aside" if aside else ""
        print(f"removed {n} entr{'y' if n == 1 else 'ies'} from {root}{forgot}")
        return 0
    info = cache.info()
    print(f"cache dir   {info['dir']}" + ("" if root.is_dir() else " (does not exist yet)"))
    print(f"entries     {info['entries']}")
    print(f"size        {format_size(info['bytes'])}")
    for label, stamp in (("last used", info["newest_use"]), ("oldest use", info["oldest_use"])):
        if stamp is not None:
            print(f"{label:11s} {dt.datetime.fromtimestamp(stamp).isoformat(timespec='seconds')}")
    # Graphs whose hits cost more than compiling them: compiled without the cache (cache.lookup).
    aside = [r for r in info["aside"] if _strikes(r) >= ASIDE_STRIKES]
    print(f"set aside   {len(aside)} graph(s) (their hits cost more than compiling, {ASIDE_STRIKES} times in a row)")
    for r in info["aside"]:
        hit, key, comp = (r.get(k) for k in ("hit_seconds", "key_seconds", "compile_seconds"))
        readable = all(isinstance(v, (int, float)) for v in (hit, key, comp))
        figures = f"last hit {hit:.2f} s (weights key {key:.2f} s), compile {comp:.2f} s" if readable else "no figures"
        state = "set aside" if _strikes(r) >= ASIDE_STRIKES else f"{_strikes(r)} slow hit(s) so far"
        print(f"  {r.get('partition') or r.get('graph', '?')}: {state}; {figures}")
    return 0


def _export_llm(args: argparse.Namespace) -> int:
    """A Hugging Face model directory (``save_pretrained`` of the model and its tokenizer) to a
    directory ``openvino_genai.LLMPipeline`` loads."""
    from pathlib import Path

    source = Path(args.model).expanduser()
    if not (source / "config.json").is_file():
        raise SystemExit(
            f"fxvino export-llm: {source} has no config.json; give a directory written by the model's "
            "save_pretrained (with its tokenizer's files beside it)"
        )
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fxvino.export.llm import export_llm

    print(f"loading {source}...", file=sys.stderr)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as e:
        why = f"no tokenizer in {source} ({e}); save it there with save_pretrained"
        raise SystemExit(f"fxvino export-llm: {why}") from e
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    out = export_llm(model, tokenizer, args.output, weights=args.weights, group_size=args.group_size)
    print(f"wrote {out}: openvino_genai.LLMPipeline({str(out)!r}, {'CPU'!r}) loads it")
    return 0


def _strikes(record: dict) -> int:
    from fxvino.cache.store import ASIDE_STRIKES

    try:
        return int(record["strikes"])
    except (KeyError, TypeError, ValueError):
        return ASIDE_STRIKES  # as ModelCache.strikes: an unreadable mark stands


def build_parser() -> argparse.ArgumentParser:
    """The ``fxvino`` command's parser (the docs' CLI reference is generated from it)."""
    parser = argparse.ArgumentParser(prog="fxvino", description="fxvino: torch.compile graphs on OpenVINO")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("ops", help="list the lowered ops by family and the Core ATen coverage")
    p.add_argument("--missing", action="store_true", help="also list the Core ATen ops not lowered yet")
    p.add_argument("--markdown", metavar="PATH", help="write the per-op coverage table (docs/ops.md) instead")
    p.add_argument("--conformance", metavar="JSON", help="conformance summary to read (default: docs/conformance.json)")
    p.set_defaults(fn=_ops)
    from fxvino.tools.zoo import MODELS

    p = sub.add_parser("explain", help="compile a reference model and report what ran where")
    p.add_argument("model", choices=sorted(MODELS))
    p.add_argument("--precision", default="f32", choices=["f32", "bf16", "f16"])
    p.add_argument("--dynamic", action="store_true")
    p.set_defaults(fn=_explain)
    p = sub.add_parser("graph", help="what OpenVINO executes for a reference model: layer histogram vs native")
    p.add_argument("model", choices=sorted(MODELS))
    p.add_argument("--precision", default="f32", choices=["f32", "bf16", "f16"])
    p.add_argument("--no-native", action="store_true", help="skip converting the model natively for comparison")
    p.add_argument("--layers", type=int, default=None, help="transformers models: number of layers (default: all)")
    p.add_argument("--precisions", action="store_true", help="count layers by type and runtime precision")
    p.add_argument("--int8", action="store_true", help="quantize with PT2E (x86 quantizer) first; implies --precisions")
    p.set_defaults(fn=_graph)
    p = sub.add_parser("cache", help="the model cache (model_caching=True): show its size, or clear it")
    p.add_argument("action", choices=["info", "clear"])
    p.add_argument("--dir", default=None, help="cache directory (default: the per-user one, as cache_dir)")
    p.set_defaults(fn=_cache)
    p = sub.add_parser("export-llm", help="a causal LM directory to a stateful IR for OpenVINO GenAI's LLMPipeline")
    p.add_argument("model", help="directory with the model's and its tokenizer's save_pretrained files")
    p.add_argument("output", help="directory to write (the decoder IR, tokenizer IRs and configs)")
    p.add_argument("--weights", default="f32", choices=["f32", "int8", "int4"], help="weight precision in the IR")
    p.add_argument("--group-size", type=int, default=128, help="int4: inputs per quantization group")
    p.set_defaults(fn=_export_llm)
    p = sub.add_parser("demo", help="the demo (make demo): BERT-base, eager vs fxvino")
    p.set_defaults(fn=lambda a: __import__("fxvino.tools.demo", fromlist=["main"]).main([]))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
