"""A fix for vLLM's EAGLE drafter on an M-RoPE target (Qwen2.5-VL): its draft steps' KV goes to the right slots.

After the first drafter pass over the verified tokens, vLLM drafts the remaining tokens one step at a time, and for
each step derives the new token's KV-cache slot from its rotary position (`positions[0]` with M-RoPE:
`eagle_step_update_slot_mapping_and_metadata`). With an image in the prompt, M-RoPE positions run behind sequence
indices (a grid of visual tokens takes fewer positions than it has tokens), so each draft step writes its key and
value over an earlier, committed slot, and reads a stale one at its own: the drafter's cache is corrupted a little
more on every round. Served, the embedded EAGLE-3 drafter then accepted [0.87, 0.76, 0.65, 0.50] per position where
the engine accepts [0.95, 0.83, 0.78, 0.73] on the same requests (vllm-project/vllm#54498, open for vLLM 0.32).

`watch()` patches the proposer when vLLM imports it: a draft step's slot comes from its sequence index, which is the
request's sequence length before the step (its seq_lens already exclude rejected drafts). Positions, sequence
lengths and text-only targets stay vLLM's own. core/serve/boot/sitecustomize.py calls it in every process that
vLLM's server starts (core/serve/server.py), so `python -m core serve`, bench-serve, the race's lanes and the tests
serve with the fix; a vLLM server started otherwise runs without it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

PROPOSER = "vllm.v1.spec_decode.llm_base_proposer"


def slots_by_index(seq_lens, block_table, block_size: int, max_model_len: int):
    """KV-cache slots of each request's next token: at sequence index seq_lens (before the step), through its block
    table; past the model's length, vLLM's padding slot (one the attention kernels skip)."""
    import torch
    from vllm.v1.spec_decode.utils import PADDING_SLOT_ID

    index = seq_lens.long()
    block = (index.clamp(max=max_model_len - 1) // block_size).clamp(max=block_table.shape[1] - 1)
    slots = block_table.gather(1, block.view(-1, 1)).view(-1).long() * block_size + index % block_size
    return torch.where(index < max_model_len, slots, PADDING_SLOT_ID)


def fix(proposer_class) -> None:
    original = proposer_class._update_positions_dependent_metadata

    def update(self, positions, common_attn_metadata, batch_size, input_batch_size, block_size):
        if not self.uses_mrope:
            return original(self, positions, common_attn_metadata, batch_size, input_batch_size, block_size)
        seq_lens = common_attn_metadata.seq_lens[:batch_size].clone()  # the original increments them in place
        positions = original(self, positions, common_attn_metadata, batch_size, input_batch_size, block_size)
        self._slot_mapping_buffer[:batch_size] = slots_by_index(
            seq_lens, common_attn_metadata.block_table_tensor[:batch_size], block_size, self.max_model_len)
        return positions

    proposer_class._update_positions_dependent_metadata = update


class _OnImport(importlib.abc.MetaPathFinder):
    """Runs `fix` right after vLLM's proposer module is executed, so nothing imports vLLM early."""

    def find_spec(self, name, path, target=None):
        if name != PROPOSER:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            fix(module.SpecDecodeBaseProposer)

        spec.loader.exec_module = exec_module
        return spec


def watch() -> None:
    if PROPOSER in sys.modules:
        fix(sys.modules[PROPOSER].SpecDecodeBaseProposer)
    elif not any(isinstance(finder, _OnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _OnImport())
