"""The text-to-image web UI in a real headless Chromium (selenium): the page loads, a generation
with a tiny random pipeline saved to disk completes, the image appears (its screenshot is not
blank), and bad input gives a clear message. The command line refuses bad input the same way.
Chromium and chromedriver come from the system packages (``make browser`` installs them)."""

from __future__ import annotations

import io
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import fxvino
from fxvino.diffusion import random_pipelines as rp

APP = [sys.executable, "-m", "fxvino.apps.txt2img"]
# The app runs the fxvino under test (this work tree's, not another install of the package).
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(Path(fxvino.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("txt2img")
    rp.sd_pipeline(root / "build").save_pretrained(root / "model")
    return root / "model"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*APP, *args], capture_output=True, text=True, timeout=300, env=ENV)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "/nonexistent/model", "--prompt", "x"], "model path '/nonexistent/model' does not exist"),
        (["--width", "60"], "width must be a positive multiple of 8"),
        (["--scheduler", "heun9"], "unknown scheduler 'heun9'; valid: euler"),
    ],
)
def test_command_line_refuses_bad_input(model_dir, args, message):
    if "--model" not in args:
        args = ["--model", str(model_dir), "--prompt", "x", *args]
    done = _cli(*args)
    assert done.returncode == 2, done.stderr[-2000:]
    assert message in done.stderr


@pytest.mark.heavy
def test_command_line_writes_an_image(model_dir, tmp_path):
    from PIL import Image

    out, with_lora = tmp_path / "cat.png", tmp_path / "cat-lora.png"
    common = ["--model", str(model_dir), "--prompt", "a cat", "--width", "64", "--height", "48", "--steps", "2",
              "--scheduler", "dpm++"]  # fmt: skip
    done = _cli(*common, "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "s/step" in done.stdout
    assert Image.open(out).size == (64, 48)
    lora = rp.random_lora(rp.sd_pipeline(tmp_path / "build"), tmp_path / "lora")
    done = _cli(*common, "--out", str(with_lora), "--lora", str(lora), "--lora-scale", "0.8")
    assert done.returncode == 0, done.stderr[-3000:]
    difference = np.abs(np.asarray(Image.open(out), np.float32) - np.asarray(Image.open(with_lora), np.float32))
    assert difference.max() > 1, "the LoRA changed nothing"
    done = _cli(*common, "--lora", str(tmp_path / "missing"))
    assert done.returncode == 2 and "LoRA path" in done.stderr


@pytest.mark.heavy
def test_command_line_writes_an_image_from_a_single_file(tmp_path):
    """A WebUI-style checkpoint file with its config directory, offline: the PNG equals the
    original pipeline's eager image (to one level of 255)."""
    import torch
    from original_layout import write_config_dir, write_single_file
    from PIL import Image

    original = rp.sd_pipeline(tmp_path / "build")
    checkpoint = write_single_file(original, tmp_path / "model.ckpt")
    config = write_config_dir(original, tmp_path / "config")
    out = tmp_path / "cat.png"
    done = subprocess.run(
        [*APP, "--model", str(checkpoint), "--config", str(config), "--prompt", "a cat", "--width", "64",
         "--height", "48", "--steps", "2", "--out", str(out)],
        capture_output=True, text=True, timeout=300, env={**ENV, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    with torch.no_grad():
        expected = original(
            prompt="a cat", num_inference_steps=2, width=64, height=48, generator=torch.Generator().manual_seed(0)
        ).images[0]
    got = np.asarray(Image.open(out), np.int16)
    assert got.shape == (48, 64, 3) and got.std() > 2, "a blank image proves nothing"
    assert np.abs(got - np.asarray(expected, np.int16)).max() <= 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _browser():
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.skip("Chromium and chromedriver are not installed: `make browser` installs them")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1600"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service(driver), options=opts)


def _set(browser, elem_id: str, value: str, tag: str = "input") -> None:
    from selenium.webdriver.common.keys import Keys

    field = browser.find_element("css selector", f"#{elem_id} {tag}")
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(Keys.DELETE)
    field.send_keys(value)
    field.send_keys(Keys.TAB)


def _not_blank(png: bytes) -> float:
    from PIL import Image

    return float(np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=np.float32).std())


def test_web_ui_generates_an_image_in_chromium(model_dir):
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    browser = _browser()
    port = _free_port()
    server = subprocess.Popen([*APP, "--model", str(model_dir), "--port", str(port)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=ENV)  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, server.stdout.read()[-3000:]
                assert time.monotonic() < deadline, "the app did not start listening"
                time.sleep(1)
        browser.get(f"http://127.0.0.1:{port}/")
        wait = WebDriverWait(browser, 240)
        wait.until(ec.presence_of_element_located(("css selector", "#generate")))
        assert "fxvino" in browser.title

        # Bad input: a clear message in the page, no image.
        _set(browser, "width", "60")
        browser.find_element("css selector", "#generate").click()
        wait.until(ec.text_to_be_present_in_element(("css selector", "body"), "must be a positive multiple of 8"))

        _set(browser, "width", "64")
        _set(browser, "height", "64")
        _set(browser, "steps", "3")
        _set(browser, "prompt", "a red house", tag="textarea")
        browser.find_element("css selector", "#generate").click()
        wait.until(ec.text_to_be_present_in_element(("css selector", "#info"), "s/step"))
        image = wait.until(ec.visibility_of_element_located(("css selector", "#image img")))
        wait.until(lambda b: image.get_attribute("complete") and image.size["width"] > 0)
        assert _not_blank(image.screenshot_as_png) > 2.0, "the generated image shows blank"
        assert "3 steps" in browser.find_element("css selector", "#info").text
    finally:
        browser.quit()
        server.terminate()
        server.wait(timeout=30)
