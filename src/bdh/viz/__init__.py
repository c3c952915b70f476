"""Seeing a BDH model at work: matplotlib plots of a run (`bdh.viz.plots`) and a self-contained interactive HTML
viewer (`bdh.viz.export` builds its data, `bdh.viz.page` renders it, `bdh.viz.server` serves it on the loopback
interface); docs/viz.md."""

from .._lazy import exports

__all__ = ["ViewOptions", "build_view", "neuron_graph", "render", "write_view"]

__getattr__, __dir__ = exports(
    __name__,
    {
        "ViewOptions": ".export:ViewOptions",
        "build_view": ".export:build_view",
        "neuron_graph": ".export:neuron_graph",
        "render": ".page:render",
        "write_view": ".export:write_view",
    },
    globals(),
)
