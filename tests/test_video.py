"""Detection in videos (inference/video.py): a synthetic video of moving squares in, an
annotated video with the input's frames, rate and size and a JSON line per frame out; with
--track every square keeps one id from its first frame to its last. Files are read back with
PyAV, streams served from loopback."""

import json
import os

import numpy as np
import pytest

from helpers import BrightSquares, LoopbackServer, untrained_small_network
from efficientdet_keras.inference.detector import Detector
from efficientdet_keras.inference.video import is_video_source

FRAMES, FPS, HEIGHT, WIDTH, SIDE = 36, 12, 120, 160, 14
# Where each square starts and how far it moves per frame (constant speeds, crossing paths).
SQUARES = (((10.0, 4.0), (1.5, 3.5)), ((90.0, 140.0), (-1.0, -3.0)))


def square_boxes(index: int) -> np.ndarray:
    """The squares' boxes [2, 4] in frame `index`."""
    return np.array([[y + dy * index, x + dx * index, y + dy * index + SIDE,
                      x + dx * index + SIDE] for (y, x), (dy, dx) in SQUARES])


def write_clip(path: str) -> None:
    """FRAMES frames at FPS of two white squares moving on a dark textured background."""
    import av
    rng = np.random.default_rng(0)
    background = rng.integers(20, 60, [HEIGHT, WIDTH, 3]).astype(np.uint8)
    with av.open(path, "w") as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        for index in range(FRAMES):
            frame = background.copy()
            for ymin, xmin, ymax, xmax in np.round(square_boxes(index)).astype(int):
                frame[ymin:ymax, xmin:xmax] = 255
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    pytest.importorskip("av", reason="the video extra (make test installs it)")
    path = str(tmp_path_factory.mktemp("video") / "squares.mp4")
    write_clip(path)
    return path


def read_back(path: str):
    """(frames, rate, (height, width)) of a written video, decoded with PyAV."""
    import av
    with av.open(path) as container:
        stream = container.streams.video[0]
        frames = sum(1 for _ in container.decode(video=0))
        return frames, stream.average_rate, (stream.height, stream.width)


@pytest.mark.quick
def test_video_sources_are_told_from_images():
    for source in ("clip.mp4", "a/b/CLIP.MOV", "0", "rtsp://cam.local/stream",
                   "http://127.0.0.1:8000/x.mp4"):
        assert is_video_source(source), source
    for source in ("photos/", "photo.jpg", "photos/*.png", "frames.json"):
        assert not is_video_source(source), source


@pytest.mark.quick
def test_tracked_squares_keep_their_ids_through_every_frame(clip, tmp_path):
    pytest.importorskip("trackers", reason="the track extra (make test installs it)")
    detector = Detector._with_backend(BrightSquares(input_size=WIDTH), "squares")
    lines = []
    result = detector.detect_video(clip, str(tmp_path / "out"), track=True, batch_size=5,
                                   report=lines.append)
    assert (result.frames, result.fps, result.size) == (FRAMES, FPS, (HEIGHT, WIDTH))
    assert read_back(result.video) == (FRAMES, FPS, (HEIGHT, WIDTH))
    assert lines == ["%d frames at %d fps: %s and %s" % (FRAMES, FPS, result.video,
                                                        result.detections)]
    with open(result.detections) as f:
        records = [json.loads(line) for line in f]
    assert [r["frame"] for r in records] == list(range(FRAMES))
    assert records[3]["time"] == pytest.approx(3 / FPS, abs=1e-4)
    ids = {0: set(), 1: set()}
    for index, record in enumerate(records):
        truth = square_boxes(index)
        assert len(record["detections"]) == 2, index
        for detection in record["detections"]:
            which = int(np.argmin(np.abs(truth - detection["box"]).sum(axis=1)))
            assert np.abs(truth[which] - detection["box"]).max() <= 2.0, (index, detection)
            if index:  # ByteTrack confirms a new track with its second detection.
                ids[which].add(detection["track_id"])
            else:
                assert detection["track_id"] is None
    # Zero switches: one id per square from then to its last frame, and two ids.
    assert len(ids[0]) == len(ids[1]) == 1 and ids[0] != ids[1] and None not in ids[0]

    # Read as a stream from a loopback server: the same frames, the same lines.
    with LoopbackServer(os.path.dirname(clip)) as server:
        streamed = detector.detect_video(server.url + "/squares.mp4", str(tmp_path / "net"),
                                         max_frames=10, report=lines.append)
    assert streamed.frames == 10 and read_back(streamed.video)[0] == 10
    untracked = [[{k: v for k, v in d.items() if k != "track_id"} for d in r["detections"]]
                 for r in records[:10]]
    with open(streamed.detections) as f:
        assert [json.loads(line)["detections"] for line in f] == untracked


def test_a_network_runs_over_the_video_and_the_command_writes_it(clip, tmp_path):
    from efficientdet_keras.workflows.detect import detect_inputs
    model = untrained_small_network()
    # What efficientdet-infer --input=<clip> runs: a video input goes to detect_video.
    result = detect_inputs(Detector.from_model(model), clip, str(tmp_path / "out"),
                           score_threshold=0.0, max_boxes=5)
    assert read_back(result.video) == (FRAMES, FPS, (HEIGHT, WIDTH))
    with open(result.detections) as f:
        records = [json.loads(line) for line in f]
    assert len(records) == FRAMES and all(len(r["detections"]) == 5 for r in records)
    assert all("track_id" not in d for r in records for d in r["detections"])


@pytest.mark.quick
def test_bad_video_inputs_say_what_is_wrong(tmp_path):
    from efficientdet_keras.cli.infer import detect
    detector = Detector._with_backend(BrightSquares(), "squares")
    with pytest.raises(FileNotFoundError, match="no video at .*missing.mp4"):
        detector.detect_video(str(tmp_path / "missing.mp4"), str(tmp_path / "out"))
    (tmp_path / "text.mp4").write_text("not a video")
    with pytest.raises(ValueError, match="text.mp4 cannot be read as a video"):
        detector.detect_video(str(tmp_path / "text.mp4"), str(tmp_path / "out"))
    # This machine has no camera: the index names the device it tried.
    with pytest.raises(ValueError, match=r"camera 7 \(/dev/video7 through FFmpeg's v4l2\) "
                                         "cannot be opened"):
        detector.detect_video("7", str(tmp_path / "out"))
    from efficientdet_keras.workflows.detect import detect_inputs
    with pytest.raises(ValueError, match="--track and --max_frames are for a video input"):
        detect_inputs(detector, "photos/", str(tmp_path / "out"), max_frames=3)
    with pytest.raises(ValueError, match="--track and --max_frames are for a video input"):
        detect(str(tmp_path / "out"), "photos/", 0.3, 20, track=True, model="x", model_dir="",
               ckpt="", model_name="", hparams="", num_threads=None, tta=None)


@pytest.mark.quick
def test_a_missing_extra_is_one_line_naming_it(clip, tmp_path, monkeypatch):
    import sys
    from efficientdet_keras.utils.extras import MissingExtraError
    detector = Detector._with_backend(BrightSquares(), "squares")
    monkeypatch.setitem(sys.modules, "trackers", None)  # As if not installed.
    with pytest.raises(MissingExtraError, match=r'^--track \(ids across frames\) needs trackers '
                       r'.*: pip install "efficientdet_keras\[track\]"$'):
        detector.detect_video(clip, str(tmp_path / "out"), track=True)
    monkeypatch.setitem(sys.modules, "av", None)
    with pytest.raises(MissingExtraError, match=r'^reading and writing videos needs av .*'
                       r'pip install "efficientdet_keras\[video\]"$'):
        detector.detect_video(clip, str(tmp_path / "out"))
