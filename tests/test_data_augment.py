import pytest
import torch

from uncurated.data import AUGMENTATION_PRESETS, Augmentation, AugmentationConfig


def garments(count=16, size=28):
    """Centred bright blocks of varying width on black, like Fashion-MNIST items."""
    images = torch.zeros(count, 1, size, size)
    for i in range(count):
        half = 3 + i % 8
        images[i, 0, 4:24, 14 - half : 14 + half] = 0.5 + 0.03 * i
    return images


@pytest.mark.parametrize("preset", sorted(AUGMENTATION_PRESETS))
def test_shape_dtype_and_range_are_kept(preset):
    config = AUGMENTATION_PRESETS[preset]
    images = garments().expand(-1, 3 if config.jitter or config.grayscale else 1, -1, -1).contiguous()
    out = Augmentation(preset)(images)
    assert out.shape == images.shape and out.dtype == images.dtype
    assert float(out.min()) >= 0 and float(out.max()) <= 1
    if preset == "none":
        assert torch.equal(out, images)


def test_two_calls_give_two_views_and_a_generator_makes_them_reproducible():
    images = garments()
    augment = Augmentation("fashion-mnist")
    first, second = augment(images), augment(images)
    assert not torch.equal(first, second)
    assert not torch.equal(first, images)
    state = torch.random.get_rng_state()
    a = augment(images, torch.Generator().manual_seed(7))
    b = augment(images, torch.Generator().manual_seed(7))
    assert torch.equal(a, b)
    assert torch.equal(state, torch.random.get_rng_state())  # the global random state is left alone
    seeded = [Augmentation("digits", seed=5)(images[:, :, :8, :8]) for _ in range(2)]
    assert torch.equal(seeded[0], seeded[1])


def test_noise_eta_one_crops_every_image():
    # A horizontal ramp: cropping to 1/5 of the area and resizing back shrinks every row's range.
    ramp = torch.linspace(0, 1, 28).expand(32, 1, 28, 28).contiguous()
    out = Augmentation("none", noise_eta=1.0)(ramp)
    spread = (out.amax(dim=-1) - out.amin(dim=-1)).amax(dim=(1, 2))
    assert bool((spread < 0.7).all())
    untouched = Augmentation("none", noise_eta=0.0)(ramp)
    assert torch.equal(untouched, ramp)


def test_noise_eta_crops_about_that_fraction():
    ramp = torch.linspace(0, 1, 28).expand(400, 1, 28, 28).contiguous()
    out = Augmentation("none", noise_eta=0.4, seed=0)(ramp)
    cropped = (out.amax(dim=-1) - out.amin(dim=-1)).amax(dim=(1, 2)) < 0.7
    assert 0.3 < cropped.float().mean().item() < 0.5


def test_digits_preset_never_flips():
    assert AUGMENTATION_PRESETS["digits"].flip == 0 and AUGMENTATION_PRESETS["fashion-mnist"].flip > 0
    # Only a flip can mirror a left-heavy image; with flips off, the mass stays on the left.
    images = torch.zeros(64, 1, 8, 8)
    images[:, :, :, :3] = 1.0
    out = Augmentation("digits", noise_std=0.0)(images)
    assert bool((out[..., :4].sum(dim=(1, 2, 3)) > out[..., 4:].sum(dim=(1, 2, 3))).all())
    flipped = Augmentation("none", flip=1.0)(images)
    assert torch.equal(flipped, images.flip(-1))


def test_overrides_are_checked():
    augment = Augmentation("fashion-mnist", crop_scale=[0.8, 1.0], noise_std=0.0)
    assert augment.config.crop_scale == (0.8, 1.0) and augment.config.noise_std == 0.0
    assert "crop_scale=(0.8, 1.0)" in repr(augment)
    with pytest.raises(ValueError, match="unknown augmentation option 'blur'"):
        Augmentation("fashion-mnist", blur=1.0)
    with pytest.raises(ValueError, match=r"noise_eta must be in \[0, 1\]"):
        Augmentation("none", noise_eta=1.5)
    with pytest.raises(ValueError, match=r"crop_scale must be in \(0, 1\]"):
        AugmentationConfig(crop_scale=(0.0, 1.0))
    with pytest.raises(ValueError, match="preset must be one of"):
        Augmentation("cifar")
    with pytest.raises(ValueError, match=r"images must be a floating-point tensor of shape \(B, C, H, W\)"):
        Augmentation("none")(torch.zeros(1, 28, 28))


def test_colour_jitter_and_grayscale_are_for_rgb_images():
    with pytest.raises(ValueError, match=r"jitter and grayscale apply to RGB images \(B, 3, H, W\), got 1 channels"):
        Augmentation("simclr")(garments())
    rgb = torch.rand(64, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    gray = Augmentation("none", grayscale=1.0)(rgb)
    assert torch.allclose(gray[:, 0], gray[:, 1]) and torch.allclose(gray[:, 1], gray[:, 2])
    jittered = Augmentation("none", jitter=1.0, seed=0)(rgb)
    assert not torch.allclose(jittered, rgb, atol=1e-3)


def test_the_hue_shift_is_bounded_by_hue_and_checked():
    red = torch.zeros(64, 3, 8, 8)
    red[:, 0] = 0.9
    red[:, 1:] = 0.1
    shifted = {hue: Augmentation("none", jitter=1.0, hue=hue, seed=0)(red)[:, :, 0, 0].argmax(1) for hue in (0.0, 0.5)}
    assert bool((shifted[0.0] == 0).all())  # brightness, contrast and saturation alone keep red red
    assert len(set(shifted[0.5].tolist())) == 3  # any hue: some views turn green, some blue
    with pytest.raises(ValueError, match="hue"):
        AugmentationConfig(hue=0.6)
