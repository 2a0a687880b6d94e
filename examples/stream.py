#!/usr/bin/env python3
"""Streams a completion through libbitsplit with ctypes (no compiled binding); prints what
`bitsplit run` prints on stdout. Usage: stream.py MODEL PROMPT [N [TEMP [SEED [BUDGET]]]]
The library is found through $BITSPLIT_LIB, else as libbitsplit.so on the loader's path."""
import ctypes
import os
import sys

lib = ctypes.CDLL(os.environ.get("BITSPLIT_LIB", "libbitsplit.so"))
token_callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_char),
                                  ctypes.c_size_t)


class SessionParams(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("variant", ctypes.c_char_p), ("temperature", ctypes.c_float),
                ("top_k", ctypes.c_int32), ("top_p", ctypes.c_float), ("min_p", ctypes.c_float),
                ("repeat_penalty", ctypes.c_float), ("repeat_last_n", ctypes.c_int32), ("seed", ctypes.c_uint64),
                ("speculative", ctypes.c_int32), ("budget", ctypes.c_int32), ("draft_chain", ctypes.c_int32),
                ("n_ctx", ctypes.c_int32), ("lookup", ctypes.c_int32), ("reserved0", ctypes.c_int32),
                ("reuse_prefix", ctypes.c_int32), ("reserved1", ctypes.c_int32), ("base_draft", ctypes.c_int32),
                ("n_stop", ctypes.c_int32), ("stop", ctypes.c_void_p)]
    # every field of the library's header (API 0.6): bitsplit_session_params_init writes the whole struct


lib.bitsplit_last_error.restype = ctypes.c_char_p
lib.bitsplit_model_load.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
lib.bitsplit_session_params_init.argtypes = [ctypes.POINTER(SessionParams)]
lib.bitsplit_session_create.argtypes = [ctypes.c_void_p, ctypes.POINTER(SessionParams), ctypes.POINTER(ctypes.c_void_p)]
lib.bitsplit_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int32, ctypes.c_int32,
                                  ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
lib.bitsplit_session_generate.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                                          ctypes.c_int32, token_callback, ctypes.c_void_p, ctypes.c_void_p]
lib.bitsplit_session_free.argtypes = [ctypes.c_void_p]
lib.bitsplit_model_free.argtypes = [ctypes.c_void_p]


def check(status):
    if status != 0:
        sys.exit("error: " + lib.bitsplit_last_error().decode())


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    model = ctypes.c_void_p()
    check(lib.bitsplit_model_load(sys.argv[1].encode(), None, ctypes.byref(model)))
    params = SessionParams()
    lib.bitsplit_session_params_init(ctypes.byref(params))
    params.temperature = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    params.seed = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    params.budget = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    session = ctypes.c_void_p()
    check(lib.bitsplit_session_create(model, ctypes.byref(params), ctypes.byref(session)))
    prompt = sys.argv[2].encode()
    tokens = (ctypes.c_int32 * 4096)()
    n = ctypes.c_size_t()
    check(lib.bitsplit_tokenize(model, prompt, len(prompt), 1, 0, tokens, 4096, ctypes.byref(n)))
    out = sys.stdout.buffer
    out.write(prompt)

    @token_callback
    def on_token(_user, _token, text, length):
        out.write(ctypes.string_at(text, length))
        out.flush()
        return 0

    check(lib.bitsplit_session_generate(session, tokens, n.value, int(sys.argv[3]) if len(sys.argv) > 3 else 64,
                                        on_token, None, None))
    out.write(b"\n")
    lib.bitsplit_session_free(session)
    lib.bitsplit_model_free(model)


if __name__ == "__main__":
    main()
