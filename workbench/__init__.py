"""The desktop window. It never imports torch, transformers or peft: it launches the
engine as a separate process and reads everything it shows from the run directory."""
