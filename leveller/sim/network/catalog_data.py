"""Model catalog of synthetic traces (derived by catalog.py, do not edit).

From h200-bf16.jsonl: real training-iteration profiles measured on one NVIDIA
H200 (PyTorch 2.11, CUDA 13, bf16 autocast). compute_s = median iteration time,
bytes = fp32 gradient bytes per all-reduce, slack_s = overlap window (catalog.py).
"""

MODELS: tuple[dict, ...] = (
    {'model': 'resnet50/b64', 'compute_s': 0.02926, 'bytes': 102228128, 'slack_s': 0.017091},
    {'model': 'resnet50/b128', 'compute_s': 0.054688, 'bytes': 102228128, 'slack_s': 0.032962},
    {'model': 'vit_b_16/b64', 'compute_s': 0.0333, 'bytes': 346270624, 'slack_s': 0.011161},
    {'model': 'bert_large/b8', 'compute_s': 0.052497, 'bytes': 1340697832, 'slack_s': 0.015204},
    {'model': 'bert_large/b16', 'compute_s': 0.072355, 'bytes': 1340697832, 'slack_s': 0.01983},
    {'model': 'gpt2_medium/b8', 'compute_s': 0.121977, 'bytes': 1419292672, 'slack_s': 0.027398},
    {'model': 'gpt2_xl/b4', 'compute_s': 0.196876, 'bytes': 6230444800, 'slack_s': 0.056352},
    {'model': 'llama_1b/b4', 'compute_s': 0.173259, 'bytes': 4400193536, 'slack_s': 0.054796},
)
