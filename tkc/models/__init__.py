"""Models built from tkc kernels (issue 11: llama2.c's decoder, `tkc.models.llama`)."""
