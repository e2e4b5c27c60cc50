"""A local Hugging Face Hub–compatible server for tests, benchmarks and the demo."""
