"""transformers compatibility: its generation keywords (keywords.py, one table), their frozen
records (records.py), the settings of a call resolved against the checkpoint's
generation_config (settings.py), the processor and stopping lists built from them
(processing.py), and the checks of a call's arguments (validation.py). It builds the values
the core's round reads; the core never imports it."""
