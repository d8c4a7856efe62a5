"""Classifies every output of a vllm_bench record that differs from vLLM alone's: at the first
differing position, the transformers target's logits (in the record's dtype) say whether the
two tokens are a tie within the dtype's precision or a bug (dynaspec/mismatch.py).

Run (main venv, transformers): python benchmarks/vllm/classify.py RECORD.json
"""

import json
import sys

import torch
from transformers import AutoModelForCausalLM

from dynaspec.mismatch import classify_mismatch

record = json.load(open(sys.argv[1]))  # noqa: SIM115
config = record["config"]
target = AutoModelForCausalLM.from_pretrained(
    config["target"], dtype=getattr(torch, config["dtype"])
)
alone = {run["concurrency"]: run["outputs"] for run in record["results"][0]["runs"]}
for result in record["results"][1:]:
    for run in result["runs"]:
        for index, output in enumerate(run["outputs"]):
            reference = alone[run["concurrency"]][index]
            if output != reference:
                prompt = torch.tensor([record["prompts"][index]])
                found = classify_mismatch(target, prompt, reference, output)
                print(result["method"], run["concurrency"], record["labels"][index], found)
