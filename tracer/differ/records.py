"""The records of a trace diff: plain, frozen msgspec structs (typed on load, JSON as they are)."""
from __future__ import annotations

from typing import Annotated, Any

import msgspec

Fraction = Annotated[float, msgspec.Meta(ge=0.0)]
Cosine = Annotated[float, msgspec.Meta(ge=-1.0001, le=1.0001)]
Count = Annotated[int, msgspec.Meta(ge=0, le=(1 << 53) - 1)]


class Tolerance(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An op diverges when its relative L2 exceeds `rtol` and its max abs difference exceeds `atol`,
    or when the two sides hold different counts of non-finite values."""

    rtol: Fraction = 1e-3
    atol: Fraction = 1e-5


class Side(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What one side of a diff is: its model, claim state, size and a description of how it was made."""

    model_class: str
    ladder_state: str
    structure_only: bool
    ops: Count
    values: Count
    description: str = ""


class OpRef(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An op present on one side only."""

    label: str
    index: Count
    func: str
    module: str
    module_call: Count
    scope: tuple[str, ...]  # enclosing module addresses, outermost first
    shape: tuple[int, ...] | None
    dtype: str | None
    params: tuple[str, ...] = ()
    io_path: str = ""  # inputs and outputs: where the tensor sits in the inputs or the output object


class FieldChange(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One field that differs between the two sides of a matched record."""

    field: str
    a: str
    b: str


class OpChange(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A matched op whose function, shape, dtype or parameters read differ."""

    label_a: str
    label_b: str
    module: str
    scope: tuple[str, ...]
    changes: tuple[FieldChange, ...]

    @property
    def dtype_only(self) -> bool:
        """True when only the output dtype differs."""
        return all(c.field == "dtype" for c in self.changes)


class RecordChange(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A module or parameter present on both sides whose fields differ."""

    address: str
    changes: tuple[FieldChange, ...]


class OpDivergence(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Numeric distance between the values of one matched op (side a is the reference).

    `rel_l2` is ||a - b|| / max(||a||, ||b||) (0 equal, at most 2); metrics are taken over the
    elements finite on both sides; `non_finite_a/b` count the others on each side.
    """

    label_a: str
    label_b: str
    index: Count  # position of the op on side a
    func: str
    module: str
    scope: tuple[str, ...]
    numel: Count
    max_abs: Fraction
    rel_l2: Fraction
    cosine: Cosine
    non_finite_a: Count
    non_finite_b: Count

    def diverged(self, tolerance: Tolerance) -> bool:
        """True when this op parts beyond `tolerance`."""
        if self.non_finite_a != self.non_finite_b:
            return True
        return self.rel_l2 > tolerance.rtol and self.max_abs > tolerance.atol


class ModuleEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A module of the merged tree: its class (per side), children (both sides' union, in order),
    its status (matched / added / removed) and the labels its calls returned on side a."""

    address: str
    class_name: str
    children: tuple[str, ...]
    status: str
    outputs_a: tuple[str, ...] = ()


class ModuleRollup(msgspec.Struct, frozen=True):
    """One module's share of the diff: structural counts and its worst numeric divergence."""

    address: str
    class_name: str
    status: str
    ops_added: int = 0
    ops_removed: int = 0
    ops_changed: int = 0  # function, shape or parameters read differ
    ops_retyped: int = 0  # only the dtype differs (what a dtype twin expects)
    ops_compared: int = 0
    ops_diverged: int = 0
    worst_op: str | None = None
    worst_rel_l2: float = 0.0
    worst_max_abs: float = 0.0
    output_rel_l2: float | None = None
    output_max_abs: float | None = None
    output_cosine: float | None = None

    @property
    def structural(self) -> bool:
        """True when the module itself or an op inside it was added, removed or changed."""
        return self.status != "matched" or bool(self.ops_added or self.ops_removed or self.ops_changed)

    @property
    def divergent(self) -> bool:
        return self.structural or self.ops_diverged > 0

    def describe(self) -> str:
        """One line: status, ops added/removed/changed/retyped, beyond tolerance, worst op, output distance."""
        parts = [self.status] if self.status != "matched" else []
        parts += [f"{sign}{n} ops" for sign, n in (("+", self.ops_added), ("-", self.ops_removed),
                                                   ("~", self.ops_changed)) if n]
        if self.ops_retyped:
            parts.append(f"{self.ops_retyped} retyped")
        if self.ops_compared:
            parts.append(f"{self.ops_diverged}/{self.ops_compared} beyond tol")
            parts.append(f"worst {self.worst_op} rel {self.worst_rel_l2:.3g}")
        if self.output_rel_l2 is not None:
            parts.append(f"output rel {self.output_rel_l2:.3g}")
        return " · ".join(parts) if parts else "same"

    def sort_key(self) -> tuple:
        """Most divergent first: structural changes, then ops beyond tolerance, then the worst distance."""
        return (not self.structural, not self.ops_diverged, -self.worst_rel_l2)


def plain(value: Any) -> Any:
    """A record (or a container of them) as JSON-able builtins."""
    return msgspec.to_builtins(value)
