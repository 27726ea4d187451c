"""What a layout is: drawn boxes, module frames, routed edges, and the whole `Layout`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from .groups import GroupTree


@dataclass(frozen=True, slots=True)
class LayoutNode:
    """A drawn box: an op, a model input/output, a collapsed module or a folded run of blocks."""

    id: str
    kind: str  # "op" | "io" | "module" | "folded"
    label: str
    x: float
    y: float
    width: float
    height: float
    op_label: str | None
    module: str | None
    repeat: int = 1
    members: tuple[str, ...] = ()

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        return (self.x - self.width / 2, self.y - self.height / 2, self.x + self.width / 2, self.y + self.height / 2)


@dataclass(frozen=True, slots=True)
class LayoutFrame:
    """An expanded module drawn as a frame around its children (`call` > 0 for a repeat call)."""

    address: str
    label: str
    depth: int
    x0: float
    y0: float
    x1: float
    y1: float
    call: int = 0


@dataclass(frozen=True, slots=True)
class LayoutEdge:
    """An orthogonal polyline from the source's bottom centre to the target's top centre."""

    source: str
    target: str
    points: tuple[tuple[float, float], ...]
    back_edge: bool = False


@dataclass(frozen=True, slots=True)
class Layout:
    """Nodes, frames and edges of one expansion state; `visible` maps every op label to its node id."""

    nodes: tuple[LayoutNode, ...]
    frames: tuple[LayoutFrame, ...]
    edges: tuple[LayoutEdge, ...]
    width: float
    height: float
    expanded: frozenset[str]
    visible: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    hidden: frozenset[str] = field(default=frozenset(), repr=False, compare=False)  # op labels left out
    groups: "GroupTree | None" = field(default=None, repr=False, compare=False)  # the module-call hierarchy drawn
    _index: dict[str, LayoutNode] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {n.id: n for n in self.nodes})

    def node(self, id: str) -> LayoutNode:
        try:
            return self._index[id]
        except KeyError:
            raise KeyError(f"no layout node {id!r}") from None

    def node_of_op(self, op_label: str) -> LayoutNode:
        """The box an op is drawn in: its own node, or the collapsed/folded module holding it."""
        return self.node(self.visible[op_label])
