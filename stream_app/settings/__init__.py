"""The worker's settings: the model with every check (``model.Settings``) and how a command
loads them from the environment and a JSON file (``load.load_settings``)."""

from stream_app.settings.load import load_settings
from stream_app.settings.model import CONFIG_FILE_ENV, Settings

__all__ = ["CONFIG_FILE_ENV", "Settings", "load_settings"]
