"""Changing what a training forward saves for its backward, after AOTAutograd's partition.

A saved value reaches the backward as a placeholder of the same name (the partitioner names
them so). Saving another tensor in its place (the base of a permutation, an NHWC copy) means
the backward must rebuild the value from that tensor on entry; both rewrites that do so
(``training.save_bases_of_permutations``, ``channels_last.save_channels_last``) go through here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch.fx


class SavedValues:
    """The forward's outputs and the backward's entries, rewritten together by :meth:`resave`."""

    def __init__(self, forward: torch.fx.GraphModule, backward: torch.fx.GraphModule) -> None:
        self.forward, self.backward = forward, backward
        self._output = forward.graph.output_node()
        self._outputs = list(self._output.args[0])
        self._entries = {n.name: n for n in backward.graph.find_nodes(op="placeholder")}
        self._last_entry = list(self._entries.values())[-1] if self._entries else None
        times = Counter(self._outputs)
        self._once = {v for v, n in times.items() if n == 1}
        self._changed = 0

    def movable(self) -> Iterator[tuple[int, torch.fx.Node]]:
        """(position, value) of each value the forward computes and returns only to save it
        (values also returned to the caller are left alone: only their saved copy would move)."""
        for i, value in enumerate(self._outputs):
            if (
                isinstance(value, torch.fx.Node)
                and value.op == "call_function"
                and value in self._once
                and value.name in self._entries
            ):
                yield i, value

    def backward_meta(self, value: torch.fx.Node) -> dict[str, Any]:
        """The meta of the backward's entry for ``value``."""
        return self._entries[value.name].meta

    def resave(self, i: int, saved: torch.fx.Node, entry_meta: dict[str, Any], target, args: tuple) -> None:
        """Saves ``saved`` at output ``i`` instead of its value; the backward takes it (its
        entry's meta becomes ``entry_meta``) and reads ``target(entry, *args)`` where it read the
        value."""
        entry = self._entries[self._outputs[i].name]
        with self.backward.graph.inserting_after(self._last_entry):
            rebuilt = self.backward.graph.call_function(target, (entry, *args))
        self._last_entry = rebuilt
        rebuilt.meta = dict(entry.meta)
        entry.replace_all_uses_with(rebuilt, delete_user_cb=lambda user: user is not rebuilt)
        entry.meta = entry_meta
        self._outputs[i] = saved
        self._changed += 1

    def commit(self) -> int:
        """Writes the forward's new outputs, drops forward nodes left unused, recompiles both
        graphs; returns how many values were saved differently."""
        if not self._changed:
            return 0
        replaced = [v for v in self._once if v not in self._outputs]
        self._output.args = (type(self._output.args[0])(self._outputs), *self._output.args[1:])
        for value in replaced:
            if not value.users:
                self.forward.graph.erase_node(value)
        self.forward.recompile()
        self.backward.recompile()
        return self._changed
