"""The C API (engine/capi/include/bitsplit/bitsplit.h) through ctypes: the library, its structs
and signatures, and C statuses turned into exceptions. Nothing here decides anything the C side
decides; it only declares what the header declares."""
from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

c_token = ctypes.c_int32
c_token_p = ctypes.POINTER(c_token)
c_size_p = ctypes.POINTER(ctypes.c_size_t)

# Statuses (bitsplit_status).
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_LOAD = 2
ERR_NOT_FOUND = 3
ERR_CONTEXT_OVERFLOW = 4
ERR_BUFFER_TOO_SMALL = 5
ERR_CANCELLED = 6
ERR_ABORTED = 7
ERR_OUT_OF_MEMORY = 8
ERR_INTERNAL = 9

# The C API version this module declares (structs are passed with this header's sizes).
API_VERSION_MAJOR = 0
API_VERSION_MINOR = 6

MAX_DRAFT_DEPTH = 64  # BITSPLIT_MAX_DRAFT_DEPTH
MAX_TOP_LOGPROBS = 20  # BITSPLIT_MAX_TOP_LOGPROBS


class Error(Exception):
    """A failed C API call: `status` is the bitsplit_status, `message` bitsplit_last_error()."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidArgumentError(Error, ValueError):
    """BITSPLIT_ERR_INVALID_ARGUMENT: an out-of-range option or a bad token, handle or buffer."""


class LoadError(Error, OSError):
    """BITSPLIT_ERR_LOAD: a model, delta or adapter file that cannot be read or is not valid."""


class NotFoundError(Error, LookupError):
    """BITSPLIT_ERR_NOT_FOUND: an unknown variant, a model without a chat template."""


class ContextOverflowError(Error, ValueError):
    """BITSPLIT_ERR_CONTEXT_OVERFLOW: the prompt and the tokens to generate exceed the context."""


class BufferTooSmallError(Error):
    """BITSPLIT_ERR_BUFFER_TOO_SMALL (the package retries with the size needed; seen only on a race)."""


class CancelledError(Error):
    """BITSPLIT_ERR_CANCELLED: the progress callback stopped a load."""


class AbortedError(Error):
    """BITSPLIT_ERR_ABORTED: abort() stopped a generation."""


class OutOfMemoryError(Error, MemoryError):
    """BITSPLIT_ERR_OUT_OF_MEMORY."""


class InternalError(Error):
    """BITSPLIT_ERR_INTERNAL: anything else; the message says what."""


_ERRORS: dict[int, type[Error]] = {
    ERR_INVALID_ARGUMENT: InvalidArgumentError,
    ERR_LOAD: LoadError,
    ERR_NOT_FOUND: NotFoundError,
    ERR_CONTEXT_OVERFLOW: ContextOverflowError,
    ERR_BUFFER_TOO_SMALL: BufferTooSmallError,
    ERR_CANCELLED: CancelledError,
    ERR_ABORTED: AbortedError,
    ERR_OUT_OF_MEMORY: OutOfMemoryError,
    ERR_INTERNAL: InternalError,
}


def error(status: int, message: str) -> Error:
    return _ERRORS.get(status, Error)(status, message)


class ModelParams(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("n_threads", ctypes.c_int32), ("vram_budget", ctypes.c_uint64),
                ("use_gpu", ctypes.c_int32), ("progress", ctypes.c_void_p), ("progress_user_data", ctypes.c_void_p),
                ("target_activations", ctypes.c_int32),
                # API 0.6
                ("reserved0", ctypes.c_int32), ("mlock", ctypes.c_int32)]


class SessionParams(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("variant", ctypes.c_char_p), ("temperature", ctypes.c_float),
                ("top_k", ctypes.c_int32), ("top_p", ctypes.c_float), ("min_p", ctypes.c_float),
                ("repeat_penalty", ctypes.c_float), ("repeat_last_n", ctypes.c_int32), ("seed", ctypes.c_uint64),
                ("speculative", ctypes.c_int32), ("budget", ctypes.c_int32), ("draft_chain", ctypes.c_int32),
                ("n_ctx", ctypes.c_int32), ("lookup", ctypes.c_int32), ("reserved0", ctypes.c_int32),
                ("reuse_prefix", ctypes.c_int32),
                # API 0.6
                ("reserved1", ctypes.c_int32), ("base_draft", ctypes.c_int32), ("n_stop", ctypes.c_int32),
                ("stop", ctypes.POINTER(ctypes.c_char_p))]


class GenerationStats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("prompt_tokens", ctypes.c_int64), ("prompt_seconds", ctypes.c_double),
                ("generated_tokens", ctypes.c_int64), ("generate_seconds", ctypes.c_double),
                ("stopped_at_eos", ctypes.c_int32), ("speculative", ctypes.c_int32), ("checks", ctypes.c_int64),
                ("drafted_tokens", ctypes.c_int64), ("accepted_tokens", ctypes.c_int64),
                ("tokens_per_check", ctypes.c_double), ("reused_tokens", ctypes.c_int64),
                # API 0.5
                ("draft_seconds", ctypes.c_double), ("verify_seconds", ctypes.c_double),
                ("lookup_drafted_tokens", ctypes.c_int64), ("lookup_accepted_tokens", ctypes.c_int64),
                ("n_depths", ctypes.c_int32), ("reserved1", ctypes.c_int32),
                ("accepted_at_depth", ctypes.c_int64 * MAX_DRAFT_DEPTH),
                ("drafted_at_depth", ctypes.c_int64 * MAX_DRAFT_DEPTH),
                # API 0.6
                ("stopped_at_stop", ctypes.c_int32), ("reserved2", ctypes.c_int32)]


class ChatParams(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("chat_template", ctypes.c_char_p),
                ("add_generation_prompt", ctypes.c_int32), ("special_tokens_in_content", ctypes.c_int32)]


PROGRESS_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
TOKEN_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, c_token, ctypes.POINTER(ctypes.c_char),
                                  ctypes.c_size_t)
LOGPROB_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, c_token, ctypes.c_float, c_token_p,
                                    ctypes.POINTER(ctypes.c_float), ctypes.c_int32)

_SIGNATURES = {
    # name: (restype, argtypes)
    "bitsplit_api_version": (ctypes.c_uint32, []),
    "bitsplit_version_string": (ctypes.c_char_p, []),
    "bitsplit_last_error": (ctypes.c_char_p, []),
    "bitsplit_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "bitsplit_model_params_init": (None, [ctypes.POINTER(ModelParams)]),
    "bitsplit_model_load": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(ModelParams), ctypes.POINTER(ctypes.c_void_p)]),
    "bitsplit_model_free": (None, [ctypes.c_void_p]),
    "bitsplit_model_locked_bytes": (ctypes.c_uint64, [ctypes.c_void_p]),
    "bitsplit_model_add_variant": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]),
    "bitsplit_model_add_lora": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_float]),
    "bitsplit_model_remove_variant": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
    "bitsplit_model_variant_count": (ctypes.c_int32, [ctypes.c_void_p]),
    "bitsplit_model_variant_name": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_int32]),
    "bitsplit_model_n_vocab": (ctypes.c_int32, [ctypes.c_void_p]),
    "bitsplit_model_n_ctx_train": (ctypes.c_int32, [ctypes.c_void_p]),
    "bitsplit_model_n_layers": (ctypes.c_int32, [ctypes.c_void_p]),
    "bitsplit_model_is_bitsplit": (ctypes.c_int32, [ctypes.c_void_p]),
    "bitsplit_model_bos": (c_token, [ctypes.c_void_p]),
    "bitsplit_model_eos": (c_token, [ctypes.c_void_p]),
    "bitsplit_model_meta_string": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_char_p]),
    "bitsplit_model_chat_template": (ctypes.c_char_p, [ctypes.c_void_p]),
    "bitsplit_model_meta_count": (ctypes.c_int32, [ctypes.c_void_p]),
    "bitsplit_model_meta_key": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_int32]),
    "bitsplit_model_meta_json": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_char_p]),
    "bitsplit_tokenize": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int32,
                                         ctypes.c_int32, c_token_p, ctypes.c_size_t, c_size_p]),
    "bitsplit_detokenize": (ctypes.c_int, [ctypes.c_void_p, c_token_p, ctypes.c_size_t, ctypes.c_char_p,
                                           ctypes.c_size_t, c_size_p]),
    "bitsplit_chat_params_init": (None, [ctypes.POINTER(ChatParams)]),
    "bitsplit_chat_render": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                            ctypes.POINTER(ChatParams), ctypes.c_char_p, ctypes.c_size_t, c_size_p]),
    "bitsplit_chat_tokenize": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                              ctypes.POINTER(ChatParams), c_token_p, ctypes.c_size_t, c_size_p]),
    "bitsplit_session_params_init": (None, [ctypes.POINTER(SessionParams)]),
    "bitsplit_session_create": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(SessionParams),
                                               ctypes.POINTER(ctypes.c_void_p)]),
    "bitsplit_session_free": (None, [ctypes.c_void_p]),
    "bitsplit_session_set_stop": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t]),
    "bitsplit_session_generate": (ctypes.c_int, [ctypes.c_void_p, c_token_p, ctypes.c_size_t, ctypes.c_int32,
                                                 TOKEN_CALLBACK, ctypes.c_void_p, ctypes.POINTER(GenerationStats)]),
    "bitsplit_session_stats": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(GenerationStats)]),
    "bitsplit_session_setting_checks": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int32,
                                                       ctypes.POINTER(ctypes.c_char_p),
                                                       ctypes.POINTER(ctypes.c_int64)]),
    "bitsplit_session_generate_logprobs": (ctypes.c_int, [ctypes.c_void_p, c_token_p, ctypes.c_size_t, ctypes.c_int32,
                                                          ctypes.c_int32, LOGPROB_CALLBACK, TOKEN_CALLBACK,
                                                          ctypes.c_void_p, ctypes.POINTER(GenerationStats)]),
    "bitsplit_session_abort": (None, [ctypes.c_void_p]),
    "bitsplit_session_feed": (ctypes.c_int, [ctypes.c_void_p, c_token_p, ctypes.c_size_t]),
    "bitsplit_session_logits": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_float)),
                                               ctypes.POINTER(ctypes.c_int32)]),
    "bitsplit_session_sample": (ctypes.c_int, [ctypes.c_void_p, c_token_p]),
    "bitsplit_session_reset": (None, [ctypes.c_void_p]),
    "bitsplit_session_n_past": (ctypes.c_int32, [ctypes.c_void_p]),
}


def library_path() -> str:
    """Where the library comes from: $BITSPLIT_LIBRARY (a built libbitsplit.so, e.g. a CMake build
    tree's), else the copy installed inside this package, else libbitsplit.so on the loader's path."""
    given = os.environ.get("BITSPLIT_LIBRARY")
    if given:
        return given
    inside = Path(__file__).with_name("libbitsplit.so")
    if inside.exists():
        return str(inside)
    return "libbitsplit.so"


_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()


def lib() -> ctypes.CDLL:
    """The loaded library with every signature declared (loaded on first use)."""
    global _lib
    with _lib_lock:
        if _lib is None:
            path = library_path()
            try:
                loaded = ctypes.CDLL(path)
            except OSError as e:
                raise LoadError(ERR_LOAD, f"cannot load the bitsplit library {path}: {e} "
                                          "(set BITSPLIT_LIBRARY to a built libbitsplit.so)") from e
            for name, (restype, argtypes) in _SIGNATURES.items():
                try:
                    fn = getattr(loaded, name)
                except AttributeError as e:
                    raise LoadError(ERR_LOAD, f"{path} has no {name}: it is older than this package "
                                              f"(C API {API_VERSION_MAJOR}.{API_VERSION_MINOR})") from e
                fn.restype = restype
                fn.argtypes = argtypes
            version = loaded.bitsplit_api_version()
            if version >> 16 != API_VERSION_MAJOR or (version & 0xFFFF) < API_VERSION_MINOR:
                raise LoadError(ERR_LOAD, f"{path} has C API {version >> 16}.{version & 0xFFFF}; this package needs "
                                          f"{API_VERSION_MAJOR}.{API_VERSION_MINOR} or a later minor version")
            _lib = loaded
        return _lib


def check(status: int) -> None:
    """Raises the Error subclass of a failed status with the calling thread's last error."""
    if status != OK:
        message = lib().bitsplit_last_error()
        raise error(status, message.decode("utf-8", "replace") if message else f"status {status}")


def last_error() -> str:
    message = lib().bitsplit_last_error()
    return message.decode("utf-8", "replace") if message else ""


def sized_call(fn, *args, item=ctypes.c_char, initial: int = 256):
    """Calls a C function that fills (buffer, capacity, *count) and retries once with the size it
    reports needing (BITSPLIT_ERR_BUFFER_TOO_SMALL); returns (buffer, count)."""
    capacity = max(initial, 1)
    count = ctypes.c_size_t()
    for _ in range(2):
        buf = (item * capacity)()
        status = fn(*args, buf, capacity, ctypes.byref(count))
        if status == ERR_BUFFER_TOO_SMALL and count.value > capacity:
            capacity = count.value
            continue
        check(status)
        return buf, count.value
    check(ERR_BUFFER_TOO_SMALL)
    raise AssertionError("unreachable")


def string_array(strings: list[bytes]) -> ctypes.Array:
    """A C array of NUL-terminated strings (const char* const*) for the C API."""
    return (ctypes.c_char_p * len(strings))(*strings)
