"""Seeing a BDH model at work: plots of a run (`plots`) and a self-contained HTML viewer (`export`,
`page`, `server`)."""

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
