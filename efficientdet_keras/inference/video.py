"""Detection in videos: a video file, a camera or a stream in; an annotated video and one JSON
line per frame out.

    detect_video(Detector("runs/demo"), "clip.mp4", "out/")            # out/clip.mp4, .jsonl
    detect_video(detector, "clip.mp4", "out/", track=True)             # ids across frames

Frames are read and written with PyAV (FFmpeg's maintained Python binding; the `video` extra),
batched through the Detector, and written at the input's frame rate and size. With `track`,
ByteTrack (Roboflow's `trackers` package; the `track` extra) gives each object an id that it
keeps across frames; the ids are in the JSON and on the video.
"""

import dataclasses
import json
import os
from fractions import Fraction
from typing import Callable, Iterator, List, Optional, Tuple

import numpy as np

from efficientdet_keras.utils.drawing import draw_boxes
from efficientdet_keras.utils.extras import import_extra
from efficientdet_keras.utils.progress import ProgressBar

VIDEO_SUFFIXES = (".mp4", ".mov", ".avi", ".mkv", ".webm", ".m4v", ".mpg", ".mpeg", ".ts")
STREAM_PREFIXES = ("rtsp://", "rtmp://", "http://", "https://", "udp://", "tcp://", "srt://")
# A camera given by its index: FFmpeg's capture device of each platform.
_CAMERAS = {"linux": ("/dev/video%d", "v4l2"), "darwin": ("%d", "avfoundation"),
            "win32": ("video=%d", "dshow")}
# The rate written when a stream does not say its own.
_DEFAULT_FPS = Fraction(30)


def is_video_source(source: str) -> bool:
    """Whether `source` is a video: a file with a video suffix, a camera index or a stream
    URL (images, folders and patterns are not)."""
    source = str(source)
    return (source.isdigit() or source.lower().startswith(STREAM_PREFIXES)
            or os.path.splitext(source)[1].lower() in VIDEO_SUFFIXES)


def _av():
    return import_extra("av", "reading and writing videos", "video")


def open_video(source: str):
    """The PyAV container of a video file, a stream URL or a camera index ("0")."""
    av = _av()
    source = str(source)
    if source.isdigit():
        import sys
        device, format_name = _CAMERAS.get(sys.platform, _CAMERAS["linux"])
        try:
            return av.open(device % int(source), format=format_name)
        except av.error.FFmpegError as e:
            raise ValueError("camera %s (%s through FFmpeg's %s) cannot be opened: %s"
                             % (source, device % int(source), format_name, e)) from None
    if "://" not in source and not os.path.exists(source):
        raise FileNotFoundError("no video at %s" % source)
    try:
        return av.open(source)
    except av.error.FFmpegError as e:
        raise ValueError("%s cannot be read as a video: %s" % (source, e)) from None


@dataclasses.dataclass
class VideoResult:
    """What detect_video wrote: the annotated video, the JSON lines, the frames and their
    rate and size (height, width)."""
    video: str
    detections: str
    frames: int
    fps: Fraction
    size: Tuple[int, int]


class VideoWriter:
    """Frames (uint8 [H, W, 3]) into a video file at `fps`: H.264 where FFmpeg has it (yuv444p
    when a side is odd, which yuv420p cannot hold), else MPEG-4."""

    def __init__(self, path: str, fps: Fraction, height: int, width: int):
        av = _av()
        self.container = av.open(path, "w")
        codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
        self.stream = self.container.add_stream(codec, rate=fps)
        self.stream.width, self.stream.height = width, height
        self.stream.pix_fmt = "yuv444p" if codec == "libx264" and (height % 2 or width % 2) \
            else "yuv420p"
        self._frame = av.VideoFrame

    def write(self, image: np.ndarray) -> None:
        frame = self._frame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
        for packet in self.stream.encode(frame):
            self.container.mux(packet)

    def close(self) -> None:
        for packet in self.stream.encode():  # What the encoder still holds.
            self.container.mux(packet)
        self.container.close()


def read_frames(container) -> Iterator[np.ndarray]:
    """The first video stream's frames as uint8 RGB [H, W, 3]."""
    for frame in container.decode(video=0):
        yield frame.to_ndarray(format="rgb24")


def frame_rate(stream) -> Fraction:
    """The stream's frame rate (its average, else its guess, else 30)."""
    for rate in (stream.average_rate, stream.guessed_rate):
        if rate:
            return Fraction(rate)
    return _DEFAULT_FPS


class Tracker:
    """ByteTrack over a video's detections: each object keeps one id across frames.

    Args:
      fps: the video's frame rate (how long a lost object is waited for is in frames).
    """

    def __init__(self, fps: float):
        trackers = import_extra("trackers", "--track (ids across frames)", "track")
        self._sv = import_extra("supervision", "--track (ids across frames)", "track")
        # A new object's track starts with its first detection and is confirmed, with an id,
        # by the next one (ByteTrack's rule: a single detection may be noise).
        self._tracker = trackers.ByteTrackTracker(frame_rate=float(fps),
                                                  minimum_consecutive_frames=1)

    def update(self, found) -> np.ndarray:
        """The ids (int64 [n], -1: no track) of one frame's Detections, in their order."""
        if not len(found):
            self._tracker.update(self._sv.Detections.empty())
            return np.zeros([0], np.int64)
        boxes = found.boxes[:, [1, 0, 3, 2]].astype(np.float32)  # x_min, y_min, x_max, y_max
        detections = self._sv.Detections(
            xyxy=boxes, confidence=found.scores.astype(np.float32),
            class_id=found.class_ids.astype(int), data={"index": np.arange(len(found))})
        tracked = self._tracker.update(detections)
        ids = np.full([len(found)], -1, np.int64)
        ids[np.asarray(tracked.data["index"], int)] = np.asarray(tracked.tracker_id, np.int64)
        return ids


def frame_record(index: int, fps: Fraction, found, ids: Optional[np.ndarray]) -> dict:
    """One line of detections.jsonl: the frame, its time and its detections (with ids)."""
    records = found.records()
    if ids is not None:
        for record, track_id in zip(records, ids.tolist()):
            record["track_id"] = track_id if track_id >= 0 else None
    return {"frame": index, "time": round(index / float(fps), 4), "detections": records}


def draw_frame(frame: np.ndarray, found, ids: Optional[np.ndarray]) -> np.ndarray:
    """The frame with its detections drawn, each labelled with its id when tracked."""
    names = [str(name) for name in found.class_names]
    if ids is not None:
        names = ["%s #%d" % (name, i) if i >= 0 else name for name, i in zip(names, ids.tolist())]
    return draw_boxes(frame, found.boxes, found.class_ids, found.scores, labels=names)


def detect_video(detector, source: str, output_dir: str, *, score_threshold: float = 0.3,
                 max_boxes: int = 20, track: bool = False, batch_size: int = 8,
                 max_frames: Optional[int] = None,
                 report: Callable[[str], None] = print) -> VideoResult:
    """Runs `detector` (an efficientdet_keras.Detector) over every frame of a video.

    Args:
      source: a video file, a stream URL or a camera index ("0").
      output_dir: gets <name>.mp4 (the frames with their detections drawn, at the input's rate
        and size) and <name>.jsonl (one line per frame: {"frame", "time", "detections"}, each
        detection as in detections.json, with "track_id" when tracking).
      track: ByteTrack ids across frames (the `track` extra).
      batch_size: frames given to the model at a time.
      max_frames: stop after this many frames (a camera or stream has no end).
      report: called with the line that says what was written.

    Raises:
      FileNotFoundError: no file at `source`.
      ValueError: `source` is not a video FFmpeg can read.
      MissingExtraError: PyAV (or, with track, the trackers package) is not installed.
    """
    container = open_video(source)
    try:
        stream = container.streams.video[0]
        fps = frame_rate(stream)
        tracker = Tracker(fps) if track else None
        name = "camera%s" % source if str(source).isdigit() else \
            os.path.splitext(os.path.basename(str(source).rstrip("/")))[0] or "stream"
        os.makedirs(output_dir, exist_ok=True)
        video_path = os.path.join(output_dir, name + ".mp4")
        jsonl_path = os.path.join(output_dir, name + ".jsonl")
        total = stream.frames or None
        if max_frames is not None:
            total = min(total or max_frames, max_frames)
        bar = ProgressBar(total, unit_name="frame")
        writer, count, batch = None, 0, []
        with open(jsonl_path, "w") as lines:
            def flush(frames: List[np.ndarray]) -> None:
                nonlocal writer, count
                found = detector.detect(frames, score_threshold=score_threshold,
                                        max_detections=max_boxes)
                for frame, each in zip(frames, found):
                    ids = tracker.update(each) if tracker is not None else None
                    if writer is None:
                        writer = VideoWriter(video_path, fps, *frame.shape[:2])
                    writer.write(draw_frame(frame, each, ids))
                    lines.write(json.dumps(frame_record(count, fps, each, ids)) + "\n")
                    count += 1
                lines.flush()
                bar.update(count)

            try:
                for frame in read_frames(container):
                    batch.append(frame)
                    if len(batch) == batch_size:
                        flush(batch)
                        batch = []
                    if max_frames is not None and count + len(batch) >= max_frames:
                        break
                if batch:
                    flush(batch)
            finally:  # An interrupted stream still leaves a playable video.
                if writer is not None:
                    writer.close()
                bar.finish()
    finally:
        container.close()
    size = (stream.codec_context.height, stream.codec_context.width)
    report("%d frames at %s fps: %s and %s" % (count, _rate_text(fps), video_path, jsonl_path))
    return VideoResult(video_path, jsonl_path, count, fps, size)


def _rate_text(fps: Fraction) -> str:
    return str(fps.numerator) if fps.denominator == 1 else "%.3f" % float(fps)
