"""Dataset layouts: one module per layout, each a `Layout` row (`row.py`) that finds the layout
in a folder by what its files hold and reads it into a Dataset, and one ordered registry of the
rows (`registry.py`) that `open_dataset`, describe(), the tools' --data help, the refusal line
and the data guide's table all read."""
