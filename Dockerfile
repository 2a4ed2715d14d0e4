# Speculum on CPU: the embedded default models, served on port 7860 (Hugging Face Spaces' Docker port).
#   docker build -t speculum . && docker run -p 7860:7860 speculum
FROM python:3.11-slim
ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 GRADIO_SERVER_NAME=0.0.0.0 GRADIO_SERVER_PORT=7860 HF_HUB_OFFLINE=1 \
    GRADIO_ANALYTICS_ENABLED=False
WORKDIR /app
# CPU torch first, so nothing below pulls a CUDA build.
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
COPY pyproject.toml README.md ./
COPY core core
COPY ui ui
RUN pip install ".[photos]"
COPY app.py ./
COPY assets assets
# Spaces run containers as uid 1000; the app writes only under /tmp (example images, Gradio's upload cache) and $HOME.
RUN useradd -m -u 1000 user
USER user
ENV HOME=/home/user
EXPOSE 7860
CMD ["python", "app.py"]
