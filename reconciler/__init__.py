"""ray-vast: rent vast.ai machines as Ray workers, declaratively, and keep the bill safe."""

__version__ = "0.1.0"
