"""The roof of the service: the entry points Django and the process managers load (urls, wsgi,
asgi, taskcluster) and the admin's templates. They import everything below; nothing imports them
(the ground floor is the package infra)."""
