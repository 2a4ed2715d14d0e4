"""Speculum: start the Gradio app (ui/) on the embedded default models.

    python app.py            # http://127.0.0.1:7860 (GRADIO_SERVER_NAME / GRADIO_SERVER_PORT override host and port)
"""

from ui.app import launch

if __name__ == "__main__":
    launch()  # Gradio reads GRADIO_SERVER_NAME and GRADIO_SERVER_PORT itself
