"""The explorer's panels, each a `pn.viewable.Viewer` over one `ExplorerState`."""
