#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_tuning (fuzz/corpus_tuning/): each
shipped database of tuning/, copies of it cut short at several places, and
garbled ones (a byte changed, a bracket dropped, a bad escape, a number out
of range or not finite, a bucket twice, an unknown kernel or bucket, deep
nesting, another device, a header alone). Deterministic: the same files on
every run."""
import glob
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, 'corpus_tuning')


def garbles(text):
    """(name, text) pairs: a database changed in one way each."""
    yield 'whole', text
    for frac in (1, 2, 5, 10, 25, 50, 75, 90, 99):
        yield 'cut_%02d' % frac, text[:len(text) * frac // 100]
    rng = random.Random(43)
    for i in range(8):
        at = rng.randrange(len(text))
        yield 'byte_%d' % i, text[:at] + chr(rng.randrange(1, 128)) + text[at + 1:]
    first = text.index('{"bucket"')
    entry = text[first:text.index('}', first) + 1]
    swaps = [
        ('no_close', text.rstrip().rstrip('}')),
        ('no_plans_close', text.replace('\n  ]', '', 1)),
        ('bad_escape', text.replace('"NVIDIA H200"', '"NVIDIA\\u0048200"', 1)),
        ('end_escape', text[:text.index('"device"') + 12] + '\\'),
        ('huge_number', text.replace('"block_k": 32', '"block_k": 1e999', 1)),
        ('negative', text.replace('"block_k": 32', '"block_k": -32', 1)),
        ('fraction', text.replace('"block_k": 32', '"block_k": 32.5', 1)),
        ('nan', text.replace('"ms": ', '"ms": nan, "x": ', 1)),
        ('twice', text.replace(entry, entry + ',\n    ' + entry, 1)),
        ('kernel', text.replace('"kernel": "mma"', '"kernel": "tensor"', 1)),
        ('bucket', text.replace('"fwd.f32.d64', '"fwd.f64.d64', 1)),
        ('no_bucket', text.replace(entry, entry.replace('"bucket"', '"bucket_"'), 1)),
        ('deep', text.replace('"tuned"', '"deep": ' + '[' * 40 + ']' * 40 + ', "tuned"', 1)),
        ('deep_ok', text.replace('"tuned"', '"deep": ' + '[{"a":' * 10 + '1' + '}]' * 10
                                 + ', "tuned"', 1)),
        ('device', text.replace('"NVIDIA H200"', '"Another GPU"', 1)),
        ('driver', text.replace('"580.', '"1.', 1)),
        ('version', text.replace('"version": 1', '"version": 2', 1)),
        ('trailing', text + 'x'),
        ('control', text.replace('"NVIDIA H200"', '"NVIDIA\tH200"', 1)),
        ('header', text[:text.index('"plans"')] + '"plans": []}'),
        ('long_key', text.replace('"tuned"', '"' + 'k' * 200 + '"', 1)),
        ('long_string', text.replace('"NVIDIA CUDA"', '"' + 'N' * 600 + '"', 1)),
        ('empty', ''),
        ('empty_object', '{}'),
    ]
    yield from swaps


def main():
    os.makedirs(OUT, exist_ok=True)
    for path in sorted(glob.glob(os.path.join(HERE, '..', 'tuning', '*.json'))):
        base = os.path.splitext(os.path.basename(path))[0]
        with open(path, encoding='utf-8') as f:
            text = f.read()
        for name, garbled in garbles(text):
            with open(os.path.join(OUT, '%s_%s' % (base, name)), 'w', encoding='utf-8',
                      newline='') as f:
                f.write(garbled)


if __name__ == '__main__':
    main()
