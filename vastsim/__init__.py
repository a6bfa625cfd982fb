"""vastsim: a faithful local vast.ai for tests, benchmarks and the embedded default."""
