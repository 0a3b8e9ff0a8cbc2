"""corral-faultyplugin: a third-party corral plugin with the mistakes its authors might make."""
