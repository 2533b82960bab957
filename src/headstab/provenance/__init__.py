"""Provenance (docs/operations.md): `records` writes the environment record of every meta.json and HDF5 file
(no h5py: training and the tokenizer loader import it); `checks` checks one file against its record (sha256,
attribute digests, checksums); `lineage` walks the chain from any file of the workflow back to the corpus shards;
`python -m headstab.provenance` prints it (`__main__`)."""
