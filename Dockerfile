# The image every tulip-memory process runs from (workers, the HTTP service, Flower, CLI).
FROM python:3.11.11-slim
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 LITELLM_LOCAL_MODEL_COST_MAP=True
WORKDIR /app

# Dependencies first, at the versions constraints.txt pins (the set CI tests): this
# layer is rebuilt only when pyproject.toml or constraints.txt change, not on every
# code change.
COPY pyproject.toml constraints.txt ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print('\n'.join(p['dependencies'] + p['optional-dependencies']['server']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt -c constraints.txt \
    && rm /tmp/requirements.txt

# Then the code, without touching the dependencies installed above.
COPY README.md ./
# The deployment's Celery settings (celery --config celeryconfig): WORKDIR is on sys.path.
COPY celeryconfig.py ./
COPY tulip_memory ./tulip_memory
COPY tulip_wire ./tulip_wire
COPY tulip_producer ./tulip_producer
COPY tulip_workers ./tulip_workers
COPY tulip_service ./tulip_service
COPY tulip_ops ./tulip_ops
RUN pip install --no-deps -c constraints.txt . && useradd --create-home tulip
USER tulip
ENTRYPOINT ["tulip-memory"]
