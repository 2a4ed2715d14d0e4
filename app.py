"""Speculum: start the Gradio app (ui/) on the embedded default models.

    python app.py            # http://127.0.0.1:7860 (GRADIO_SERVER_NAME / PORT override host and port)
"""

import os

from ui.app import launch

if __name__ == "__main__":
    launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"), server_port=int(os.environ.get("PORT", 7860)))
