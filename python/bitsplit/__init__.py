"""bitsplit: LLM inference with lossless speculative decoding, from Python.

A thin layer over the C API (libbitsplit, engine/capi/include/bitsplit/bitsplit.h); docs/PYTHON.md
describes it.

    import bitsplit
    model = bitsplit.Model("base.bitsplit.gguf")
    text, stats = model.generate("In the beginning", max_tokens=64, temperature=0)
    print(text, stats.tokens_per_check)
"""
from ._capi import (AbortedError, BufferTooSmallError, CancelledError, ContextOverflowError, Error,
                    InternalError, InvalidArgumentError, LoadError, NotFoundError, OutOfMemoryError)
from ._capi import library_path as _library_path
from ._capi import lib as _lib
from ._model import Metadata, Model, Piece, Session, Stats, TokenLogprob
from ._bench import OVERALL, AcceptResult, AcceptRow, BenchPrompt, bench_accept, load_prompts

__all__ = ["Model", "Session", "Stats", "TokenLogprob", "Piece", "Metadata", "Error", "InvalidArgumentError", "LoadError", "NotFoundError",
           "ContextOverflowError", "BufferTooSmallError", "CancelledError", "AbortedError", "OutOfMemoryError",
           "InternalError", "library_version", "__version__", "bench_accept", "load_prompts", "BenchPrompt", "AcceptRow",
           "AcceptResult", "OVERALL"]


def library_version() -> str:
    """The loaded libbitsplit's version ("MAJOR.MINOR.PATCH")."""
    return _lib().bitsplit_version_string().decode()


def _package_version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version
        try:
            return version("bitsplit")
        except PackageNotFoundError:
            pass
    except ImportError:
        pass
    return "0+source"  # run from the source tree (PYTHONPATH=python): library_version() has the library's


__version__ = _package_version()
