"""Prompt sets (paper §A.4): `loading` reads the files named in the config's `prompt_sets` (at parse time and in
the jobs); `pickle_import` converts the authors' prompt pickles to such files (`python -m headstab.prompts import-pickle`)."""
