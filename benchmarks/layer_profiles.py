"""Writes benchmarks/layer_profiles.json: for each model of the scaling
model, its layers in forward order with their trainable parameters (one
count per gradient tensor) and forward FLOPs per sample, so
scaling_model.py can replay a backward pass and the allreduces that overlap
it. Run once (it builds the Keras models, no weights downloaded):

    python benchmarks/layer_profiles.py

FLOPs count multiply-adds as 2 in convolutions and dense layers only; the
other layers (batch norm, activations, pooling) hold little of the compute
and get none. BERT-large comes from its architecture (no Keras model).
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "layer_profiles.json")


def layer_flops(layer):
    """Forward FLOPs per sample of a Keras layer (0 where not counted)."""
    kind = type(layer).__name__
    if kind not in ("Conv2D", "DepthwiseConv2D", "Dense"):
        return 0
    out = layer.output.shape
    if kind == "Dense":
        return 2 * int(layer.kernel.shape[0]) * int(layer.kernel.shape[1])
    # (kh, kw, input channels per group, outputs): for a depthwise kernel
    # the last is the channel multiplier, and every product is one output.
    kh, kw, cin, cout = (int(d) for d in layer.kernel.shape)
    return 2 * int(out[1]) * int(out[2]) * kh * kw * cin * cout


def keras_profile(build):
    model = build(weights=None)
    layers = []
    for layer in model.layers:
        tensors = [int(w.numpy().size) for w in layer.trainable_weights]
        flops = layer_flops(layer)
        if tensors or flops:
            layers.append({"name": layer.name, "tensors": tensors, "flops": flops})
    return layers


def bert_large_profile(seq=128, hidden=1024, layers=24, ffn=4096, vocab=30522, positions=512):
    """BERT-large's encoder, per sample of `seq` tokens: embeddings first,
    then each layer's attention (Q, K, V, output) and feed-forward blocks,
    then the pooler and the masked-LM head's transform (its output weights
    are the word embeddings)."""
    h = hidden
    out = [{"name": "embeddings", "tensors": [vocab * h, positions * h, 2 * h, h, h], "flops": 0}]
    for i in range(layers):
        out.append({"name": "layer%d.attention" % i,
                    "tensors": [h * h, h, h * h, h, h * h, h, h * h, h, h, h],
                    # Q, K, V and output projections, plus scores and weighted sum
                    "flops": seq * (4 * 2 * h * h) + 2 * 2 * seq * seq * h})
        out.append({"name": "layer%d.ffn" % i, "tensors": [h * ffn, ffn, ffn * h, h, h, h],
                    "flops": seq * 2 * 2 * h * ffn})
    out.append({"name": "pooler", "tensors": [h * h, h], "flops": 2 * h * h})
    out.append({"name": "mlm_head", "tensors": [h * h, h, h, h, vocab],
                "flops": seq * (2 * h * h + 2 * h * vocab)})
    return out


def main():
    import keras
    profiles = {
        "ResNet-101": keras_profile(keras.applications.ResNet101),
        "VGG-16": keras_profile(keras.applications.VGG16),
        "Inception V3": keras_profile(keras.applications.InceptionV3),
        "BERT-large": bert_large_profile(),
    }
    for name, layers in profiles.items():
        params = sum(sum(layer["tensors"]) for layer in layers)
        tensors = sum(len(layer["tensors"]) for layer in layers)
        gflops = sum(layer["flops"] for layer in layers) / 1e9
        print("%s: %d parameters in %d tensors, %.1f forward GFLOPs per sample" % (name, params, tensors, gflops))
    with open(OUT, "w") as f:
        json.dump(profiles, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
