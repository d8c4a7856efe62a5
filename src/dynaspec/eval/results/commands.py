"""Which `dynaspec generate` command reproduces a `dynaspec bench` method: the one table.

The results page and the README's hardware table print, beside a bench method's figures, the
command a user runs to get that setting. When a flag of `dynaspec generate` is renamed, this
table changes with it (tests/test_results.py parses every command with the CLI's parser).
Each command pins every flag that matters but the schedule, `adaptive` (the CLI's default:
core/config.py DEFAULT_SCHEDULE), so a later change of another default cannot change what it
names. The flags' meaning: `dynaspec generate --help`.
"""

from __future__ import annotations

LOOKUP = "--prompt-lookup 32"  # the bench's prompt lookup (LOOKUP_TOKENS)

# bench method -> flags of `dynaspec generate` (eval/bench/fast.py and methods.py say what
# each method runs). A setting the CLI dropped as measured slower on every CPU class (int4
# weights with float activations) has no command: its records show without one.
METHOD_FLAGS: dict[str, str] = {
    # the transformers target as loaded (eager)
    "target": "--no-draft",
    "constant": "--draft-quantize none --schedule constant --num-assistant-tokens 5",
    "heuristic": "--draft-quantize none --schedule heuristic --num-assistant-tokens 5",
    "dynamic": "--draft-quantize none --schedule dynamic",
    "adaptive": "--draft-quantize none",
    "prompt-lookup": f"--no-draft {LOOKUP}",
    "hybrid": f"--draft-quantize none {LOOKUP}",
    "adaptive-w4a8": "--draft-quantize w4a8",
    "hybrid-w4a8": f"--draft-quantize w4a8 {LOOKUP}",
    # the static target in the machine's dtype: the target's own output
    "static-target": "--static --no-draft",
    "static-adaptive": "--static --draft-quantize none",
    "static-hybrid": f"--static --draft-quantize none {LOOKUP}",
    "static-adaptive-llamacpp": "--static --draft-engine llamacpp",
    "static-hybrid-llamacpp": f"--static --draft-engine llamacpp {LOOKUP}",
    "fast-adaptive": "--static --draft-quantize int8",
    "fast-hybrid": f"--static --draft-quantize int8 {LOOKUP}",
    "fast-hybrid-w4a8": f"--static --draft-quantize w4a8 {LOOKUP}",
    # quantized targets: each its own output
    "int8-target": "--quantize int8 --no-draft",
    "int8-adaptive": "--quantize int8 --draft-quantize int8",
    "int8-hybrid": f"--quantize int8 --draft-quantize int8 {LOOKUP}",
    "int8-adaptive-llamacpp": "--quantize int8 --draft-engine llamacpp",
    "int8-hybrid-llamacpp": f"--quantize int8 --draft-engine llamacpp {LOOKUP}",
    "w8a8-target": "--quantize w8a8 --no-draft",
    "w8a8-adaptive": "--quantize w8a8 --draft-quantize int8",
    "w8a8-hybrid": f"--quantize w8a8 --draft-quantize int8 {LOOKUP}",
    "w8a8-hybrid-w4a8": f"--quantize w8a8 --draft-quantize w4a8 {LOOKUP}",
    "w4a8-target": "--quantize w4a8 --no-draft",
    "w4a8-adaptive": "--quantize w4a8 --draft-quantize int8",
    "w4a8-adaptive-w4a8": "--quantize w4a8 --draft-quantize w4a8",
    "w4a8-hybrid": f"--quantize w4a8 --draft-quantize int8 {LOOKUP}",
    "w4a8-hybrid-w4a8": f"--quantize w4a8 --draft-quantize w4a8 {LOOKUP}",
}

# families of other engines' methods (transformers, llama.cpp, OpenVINO GenAI)
PEER_FAMILIES = frozenset({"hf", "llamacpp", "openvino"})
DEFAULT_PAIR = "qwen2.5-coder"  # `dynaspec generate`'s default --pair


def is_peer(method: str, family: str | None) -> bool:
    """Whether a bench method runs another engine (no `dynaspec generate` command)."""
    return family in PEER_FAMILIES or method.startswith(("hf-", "llamacpp-", "openvino-"))


def generate_command(method: str, pair: str | None = None) -> str | None:
    """`dynaspec generate [--pair P] FLAGS "PROMPT"` for a bench method, or None when no
    command reproduces it (another engine's, or a method this table does not know)."""
    flags = METHOD_FLAGS.get(method)
    if flags is None:
        return None
    chosen = f"--pair {pair} " if pair and pair != DEFAULT_PAIR else ""
    return f'dynaspec generate {chosen}{flags} "PROMPT"'
