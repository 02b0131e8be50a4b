"""Write the typed overloads of ``Client.call``, ``Client.submit`` and ``aio.Client.call``.

One overload pair per function of the registry (``offrac/functions.json``): the function's
name as a ``Literal``, its input as the element type it takes, its parameters by name and
type, and its result type (``return_info=True`` gives ``(result, ResponseHeader)``). Then
two fallbacks: a function *id* with any parameters (unchecked), and a function name held in
a ``str`` variable with only the raw ``param=``, so a misspelt parameter of a named function
matches no overload and ``mypy`` reports it.

    python3 python/tools/gen_overloads.py          # rewrite the generated blocks
    python3 python/tools/gen_overloads.py --check  # exit 1 if they are out of date

``python/tests/test_typing.py`` runs the check.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "offrac"

#: Input layout -> the argument type a caller may pass (raw bytes always pass through).
INPUT = {
    "bytes": "BytesInput",
    "int32[]": "IntInput",
    "uint32[]": "IntInput",
    "uint16[]": "IntInput",
    "float32[]": "FloatInput",
    "ragged<uint32>": "RaggedInput",
}
#: Output layout -> the decoded result type.
OUTPUT = {
    "bytes": "bytes",
    "int32[]": "npt.NDArray[np.int32]",
    "uint32[]": "npt.NDArray[np.uint32]",
    "float32[]": "npt.NDArray[np.float32]",
    "ragged<uint32>": "Ragged",
    "ragged<uint32,float32>": "CSR",
}
PARAM = {"unsigned": "int", "signed": "int", "float32": "float"}
#: Per method: (file, ``def`` prefix, result wrapper, keyword arguments after the parameters).
METHODS = {
    "call": ("client.py", "def", "{}", ["timeout: float | None = ..."]),
    "submit": ("client.py", "def", "RequestFuture[{}]", []),
    "aio-call": ("aio.py", "async def", "{}", ["timeout: float | None = ..."]),
}


def _overload(prefix: str, name: str, args: list[str], result: str) -> list[str]:
    return [
        "    @overload",
        f"    {prefix} {name}(",
        *(f"        {a}," for a in args),
        f"    ) -> {result}: ...",
    ]


def render(method: str) -> list[str]:
    """The lines of one generated block (without its markers)."""
    _file, prefix, wrap, extra = METHODS[method]
    name = method.removeprefix("aio-")
    functions = json.loads((PKG / "functions.json").read_text())["functions"]
    common = ["tenant: int | None = ...", *extra, "budget: float | None = ..."]
    out: list[str] = []
    for f in functions:
        data_type = "MatmulInput" if f["name"] == "matmul" else INPUT[f["input"]]
        data = f"data: {data_type}" + (" = ..." if f["input"] == "bytes" else "")
        params = [
            f"{p['name']}: {PARAM[p['kind']]}" + ("" if p["required"] else " = ...") for p in f["params"]
        ]
        result = OUTPUT[f["output"]]
        # The synchronous client reads array results straight into a caller's array.
        into = [f"out: {result} | None = ..."] if method != "aio-call" and result.startswith("npt.") else []
        for info, res in (
            ("Literal[False] = ...", result),
            ("Literal[True]", f"tuple[{result}, ResponseHeader]"),
        ):
            args = [
                "self",
                f'function: Literal["{f["name"]}"]',
                data,
                "*",
                *params,
                *common,
                *into,
                f"return_info: {info}",
            ]
            out += _overload(prefix, name, args, wrap.format(res))
    any_out = [] if method == "aio-call" else ["out: npt.NDArray[Any] | None = ..."]
    tail = [*common, *any_out, "return_info: bool = ..."]
    out += _overload(
        prefix,
        name,
        ["self", "function: int", "data: Data = ...", "*", *tail, "**params: object"],
        wrap.format("Any"),
    )
    out += _overload(
        prefix,
        name,
        ["self", "function: str", "data: Data = ...", "*", *tail, "param: int = ..."],
        wrap.format("Any"),
    )
    return out


def markers(method: str) -> tuple[str, str]:
    return (
        f"    # BEGIN GENERATED OVERLOADS {method} (python/tools/gen_overloads.py)",
        f"    # END GENERATED OVERLOADS {method}",
    )


def apply(text: str, method: str) -> str:
    begin, end = markers(method)
    lines = text.split("\n")
    i, j = lines.index(begin), lines.index(end)
    return "\n".join([*lines[: i + 1], *render(method), *lines[j:]])


def main() -> int:
    check = "--check" in sys.argv
    stale = []
    for method, (file, *_rest) in METHODS.items():
        path = PKG / file
        text = path.read_text()
        new = apply(text, method)
        if new != text:
            stale.append(f"{file}: {method}")
            if not check:
                path.write_text(new)
    if check and stale:
        print("out of date (run python3 python/tools/gen_overloads.py):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
