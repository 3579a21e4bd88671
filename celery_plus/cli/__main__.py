"""``python -m celery_plus.cli``: the ``celery-plus`` command."""

from celery_plus.cli import main

if __name__ == "__main__":
    main()
