"""Launch-script reading speed: is the bash-subset interpreter linear in the script's length?

    python -m benchmarks.shell_args [--repeat 3]

Times ``strategies.shell_args.launch_words`` on three synthetic scripts at 1/10 of the size and at
full size (about 2 MB each): one line of plain ``--flag value`` words, an array of quoted two-word
items splatted unquoted and quoted (``${A[@]} "${A[@]}"``), and a 20,000-line script of assignments
and ``if`` blocks. It reports the best of ``--repeat`` runs of each and the full / tenth ratio,
which is about 10 for linear work (100 for quadratic). Issue 27: the regexp-substitution reader it
replaced took over a minute on a 2 MB line.
"""
from __future__ import annotations

import argparse
import time

from strategies.shell_args import launch_words


def scripts(scale: int) -> dict:
    n = 14_000 * scale
    plain = "torchrun pretrain_gpt.py " + " ".join(f"--x{i} {i}" for i in range(n))
    arr = "A=(" + " ".join(f'"--y{i} v"' for i in range(int(1.5 * n))) + ')\ntorchrun pretrain_gpt.py ${A[@]} "${A[@]}"'
    lines = [f"V{i}=${{V{i}:-{i}}}\nif [[ $V{i} == {i} ]]; then A+=(--z{i}); else A+=(--w{i}); fi"
             for i in range(2 * scale * 1000)]
    blocks = "\n".join(lines) + "\ntorchrun pretrain_gpt.py ${A[@]}\n"
    return {"one long line": plain, "array splats": arr, "assignments and ifs": blocks}


def best(text: str, repeat: int) -> float:
    t = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        launch_words(text)
        t = min(t, time.perf_counter() - t0)
    return t


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    small, full = scripts(1), scripts(10)
    print(f"{'script':22s} {'bytes':>10s} {'s (1/10)':>9s} {'s (full)':>9s} {'ratio':>6s}")
    for name in full:
        a, b = best(small[name], args.repeat), best(full[name], args.repeat)
        print(f"{name:22s} {len(full[name]):10,d} {a:9.3f} {b:9.3f} {b / a:6.1f}")


if __name__ == "__main__":
    main()
