#!/usr/bin/env python3
"""Talks to a chorus node from Python: two answers generated at once over one shared prompt block.

    build/chorus node --endpoint tcp://127.0.0.1:5555 &
    PYTHONPATH=build/python:clients/python python3 clients/python/example.py tcp://127.0.0.1:5555
"""
import sys

from chorus_client import ChorusClient

endpoint = sys.argv[1] if len(sys.argv) > 1 else "tcp://127.0.0.1:5555"
question = sys.argv[2] if len(sys.argv) > 2 else "Name a color of the sky."
client = ChorusClient(endpoint)
prompt = client.create_block("prompt")
client.wait(client.forward(prompt, text="<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                                        "<|im_start|>user\n" + question + "<|im_end|>\n"))
answers = [client.create_block("answer %d" % i) for i in range(2)]
requests = [client.generate(a, view=[prompt], prefill_text="<|im_start|>assistant\n", max_tokens=40,
                            temperature=0.7, seed=i, stop_strings=["\n"]) for i, a in enumerate(answers)]
for i, r in enumerate(requests):
    text = "".join(e.get("text", "") for e in client.events(r) if e["kind"] == "TokenEvent")
    print("[%d] %s" % (i + 1, text.strip()))
client.close()
