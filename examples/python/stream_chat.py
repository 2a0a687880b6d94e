#!/usr/bin/env python3
"""Chats with a model in the terminal through the bitsplit package, streaming each reply: the
conversation is rendered by the engine's own chat template interpreter (the model's template, or
--chat-template FILE), and Ctrl-C stops a reply without leaving.

    python3 examples/python/stream_chat.py qwen-1.5b.bitsplit.gguf --system "Be terse."
"""
import argparse
import sys

import bitsplit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--system", help="a system message to start the conversation with")
    ap.add_argument("--chat-template", help="a Jinja chat template file to use instead of the model's")
    ap.add_argument("-n", "--max-tokens", type=int, default=512)
    ap.add_argument("--temp", type=float, default=0.7)
    ap.add_argument("--variant", help="a LoRA adapter (NAME=FILE) to answer with")
    args = ap.parse_args()

    model = bitsplit.Model(args.model)
    template = open(args.chat_template, encoding="utf-8").read() if args.chat_template else None
    if template is None and model.chat_template is None:
        sys.exit(f"error: {args.model} has no chat template; give one with --chat-template FILE")
    variant = None
    if args.variant:
        variant, path = args.variant.split("=", 1)
        model.add_lora(variant, path)

    messages = [{"role": "system", "content": args.system}] if args.system else []
    print("Ctrl-C stops a reply, Ctrl-D leaves.", file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except EOFError:
            break
        except KeyboardInterrupt:
            print()
            continue
        messages.append({"role": "user", "content": line})
        reply = []
        try:
            room = model.n_ctx - len(model.tokenize_chat(messages, chat_template=template))
            if room <= 0:
                raise bitsplit.ContextOverflowError(4, "the conversation fills the context")
            for chunk in model.create_chat_completion(messages, min(args.max_tokens, room), stream=True, temperature=args.temp,
                                                      chat_template=template, variant=variant):
                piece = chunk["choices"][0]["delta"].get("content", "")
                reply.append(piece)
                print(piece, end="", flush=True)
        except KeyboardInterrupt:
            print(" (stopped)", end="")
        except bitsplit.ContextOverflowError as e:
            print(f"\nerror: {e}; the conversation is too long, starting over", file=sys.stderr)
            messages = messages[:1] if args.system else []
            continue
        print()
        messages.append({"role": "assistant", "content": "".join(reply)})


if __name__ == "__main__":
    main()
