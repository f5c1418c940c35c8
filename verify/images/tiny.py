"""Tiny diffusers and CLIP checkpoints built from configs, with random weights: for tests and smoke
runs on a machine that reaches no model hub.

- `tokenizer_files(folder)`: a CLIP BPE vocabulary of single characters (a..z and the space-free
  word ends "x</w>"), no merges: prompts of lower-case words tokenize one letter per token.
- `build_pipeline(folder)`: a StableDiffusionPipeline (UNet2DConditionModel with one cross-attention
  down block and one plain one, a two-block AutoencoderKL, a one-layer CLIPTextModel, a DDIM
  scheduler) saved with `save_pretrained`; a few thousand parameters, 8×8 latents, 16×16 images.
- `sd3_pipeline(folder)`: a StableDiffusion3Pipeline (an SD3Transformer2DModel of two joint blocks,
  two CLIPTextModelWithProjection encoders, no T5), in memory: diffusers cannot save a pipeline
  whose third text encoder is None.
- `build_clip(folder)`: a CLIPModel and CLIPProcessor for 16×16 images, saved the same way.
"""

from __future__ import annotations

import json
import os
import string
from pathlib import Path

MAX_TOKENS = 64


def tokenizer_files(folder: str | os.PathLike) -> Path:
    """vocab.json and merges.txt of the character-level CLIP tokenizer, written into `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for c in string.ascii_lowercase:
        vocab[c] = len(vocab)
        vocab[c + "</w>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    return folder


def tokenizer(folder: str | os.PathLike):
    from transformers import CLIPTokenizer

    folder = tokenizer_files(folder)
    return CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), model_max_length=MAX_TOKENS)


def _text_config(vocab_size: int, hidden: int):
    from transformers import CLIPTextConfig

    return CLIPTextConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                          num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=MAX_TOKENS,
                          bos_token_id=0, eos_token_id=1, pad_token_id=1, projection_dim=hidden)


def build_pipeline(folder: str | os.PathLike, seed: int = 0, channels: tuple[int, int] = (4, 8),
                   text_hidden: int = 8) -> Path:
    """A tiny StableDiffusionPipeline saved into `folder`; returns the folder."""
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel

    folder = Path(folder)
    tok = tokenizer(folder.parent / f".{folder.name}-tokenizer")
    torch.manual_seed(seed)
    text_encoder = CLIPTextModel(_text_config(len(tok), text_hidden))
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=channels,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=text_hidden,
        attention_head_dim=2, norm_num_groups=2)
    vae = AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(4, 4), latent_channels=4,
        norm_num_groups=2, sample_size=16)
    scheduler = DDIMScheduler(beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012,
                              clip_sample=False, set_alpha_to_one=False, steps_offset=1)
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tok, unet=unet,
                                   scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)
    pipe.save_pretrained(folder)
    return folder


def sd3_pipeline(folder: str | os.PathLike, seed: int = 0, text_hidden: int = 8):
    """A tiny StableDiffusion3Pipeline (tokenizer files written into `folder`), not saved."""
    import torch
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )
    from transformers import CLIPTextModelWithProjection

    tok = tokenizer(folder)
    torch.manual_seed(seed)
    encoders = [CLIPTextModelWithProjection(_text_config(len(tok), text_hidden)) for _ in range(2)]
    transformer = SD3Transformer2DModel(
        sample_size=8, patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=4,
        num_attention_heads=2, joint_attention_dim=2 * text_hidden, caption_projection_dim=8,
        pooled_projection_dim=2 * text_hidden)
    vae = AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(4, 4), latent_channels=4,
        norm_num_groups=2, sample_size=16, shift_factor=0.0, use_quant_conv=False, use_post_quant_conv=False)
    pipe = StableDiffusion3Pipeline(transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(),
                                    vae=vae, text_encoder=encoders[0], tokenizer=tok,
                                    text_encoder_2=encoders[1], tokenizer_2=tok, text_encoder_3=None,
                                    tokenizer_3=None)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def build_clip(folder: str | os.PathLike, seed: int = 0, hidden: int = 8, image_size: int = 16) -> Path:
    """A tiny CLIPModel with its CLIPProcessor saved into `folder`; returns the folder."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPVisionConfig

    folder = Path(folder)
    tok = tokenizer(folder.parent / f".{folder.name}-tokenizer")
    torch.manual_seed(seed)
    vision = CLIPVisionConfig(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=1,
                              num_attention_heads=2, image_size=image_size, patch_size=8,
                              projection_dim=hidden)
    config = CLIPConfig(text_config=_text_config(len(tok), hidden).to_dict(), vision_config=vision.to_dict(),
                        projection_dim=hidden)
    model = CLIPModel(config)
    images = CLIPImageProcessor(size={"shortest_edge": image_size}, crop_size={"height": image_size,
                                                                               "width": image_size})
    CLIPProcessor(image_processor=images, tokenizer=tok).save_pretrained(folder)
    model.save_pretrained(folder)
    return folder
