"""The task's own metrics (numpy only): classification, detection, segmentation, CTC,
embedding and generic tensors, and the ``{kind, metric, float, artifact, drop}`` record
verify and bench write (``evaluate``)."""
